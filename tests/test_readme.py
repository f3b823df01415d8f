"""README.md must not drift from the code: settings, commands, modules, metrics, example.

The configuration table is checked row by row against ``config.OPTIONS`` (the
table ``agentpool --help`` is generated from), the quick-start commands must
stay the two documented set-up commands, every module the architecture
section names must exist, every metric the agent exports must be listed, and
the simulation-kit example must actually run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentpool.config import OPTIONS, Option

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else len(README)]


def _row(opt: Option) -> str:
    default = f"`{opt.default}`" if opt.default is not None else "(unset)"
    return f"| `{opt.env}` | `{opt.flag}` | {default} | {opt.help} |"


def test_every_setting_has_its_row_in_the_configuration_table() -> None:
    table = _section("Configuration")
    missing = [_row(opt) for opt in OPTIONS if _row(opt) not in table]
    # The message is the rows to paste, so fixing the README is one copy.
    assert not missing, "README configuration table is missing or outdated rows:\n" + "\n".join(
        missing
    )
    documented = re.findall(r"^\| `([A-Z_]+)` \| `--", table, re.MULTILINE)
    assert documented == [opt.env for opt in OPTIONS]  # same order, nothing extra


def test_quick_start_is_the_two_setup_commands() -> None:
    quick = _section("Quick start")
    assert "\n    bash scripts/demo\n" in quick
    assert "\n    bash scripts/check\n" in quick
    assert quick.index("bash scripts/demo") < quick.index("bash scripts/check")
    for script in ("scripts/demo", "scripts/check"):
        assert (ROOT / script).is_file()


def test_demo_flags_are_documented() -> None:
    from agentpool.cli import demo

    flags = [opt for param in demo.params for opt in param.opts]
    quick = _section("Quick start")
    assert flags
    for flag in flags:
        assert f"| `{flag}` |" in quick, flag


def test_architecture_names_only_modules_that_exist() -> None:
    arch = _section("Architecture")
    for cell in re.findall(r"\| ([^|]*`agentpool/[^|]*) \|\n", arch):
        paths = re.findall(r"`([\w/.]+)`", cell)
        base = ROOT / paths[0]
        assert base.exists(), paths[0]
        for other in paths[1:]:
            # Short names in a cell are siblings of its first, full path.
            assert (ROOT / other).exists() or (base.parent / other).exists(), other


def test_every_exported_metric_is_documented() -> None:
    names: set[str] = set()
    for path in (ROOT / "agentpool").rglob("*.py"):
        if {"sim", "demo"} & set(path.relative_to(ROOT / "agentpool").parts):
            continue
        if path.name == "config.py":  # settings fields such as "joulie_api", not metrics
            continue
        names |= set(re.findall(r'"((?:joulie|agentpool)_[a-z_]+)"', path.read_text()))
    metrics = _section("Metrics")
    assert names
    # Counters are exported with a _total suffix; the README lists the exported name.
    assert sorted(n for n in names if n not in metrics) == []


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_simulation_kit_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = re.search(r"```python\n(.*?)```", _section("Simulation kit"), re.DOTALL)
    assert block
    monkeypatch.chdir(tmp_path)  # it writes ./kubeconfig
    exec(compile(block[1], "README.md (simulation kit)", "exec"), {"__name__": "readme"})
    assert (tmp_path / "kubeconfig").is_file()
