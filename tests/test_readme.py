"""README.md must not drift from the code: settings, commands, modules, metrics, example.

The configuration table is checked row by row against ``config.OPTIONS`` (the
table ``agentpool --help`` is generated from), the quick-start commands must
stay the two documented set-up commands, every path the architecture
section names must exist, every metric the agent exports must be listed, and
the simulation-kit example must actually run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentpool.config.options import OPTIONS, Option

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


def test_architecture_names_only_paths_that_exist() -> None:
    tree = re.search(r"```\n(agentpool/\n.*?)```", _section("Architecture"), re.DOTALL)
    assert tree
    folders = re.findall(r"^  (\w+)/ ", tree[1], re.MULTILINE)
    assert folders
    for folder in folders:
        assert (ROOT / "agentpool" / folder / "__init__.py").is_file(), folder
    named = set(re.findall(r"(?<![\w/.])(\w+\.py|\w+/)(?=[\s,):])", tree[1])) - {"agentpool/"}
    every = {p.relative_to(ROOT / "agentpool") for p in (ROOT / "agentpool").rglob("*")}
    for name in sorted(named):
        # A name in the tree is a file or folder somewhere under agentpool/ (most are
        # inside the folder on their line).
        assert any(p.name == name.rstrip("/") for p in every), name


def test_every_exported_metric_is_documented() -> None:
    names: set[str] = set()
    for path in (ROOT / "agentpool").rglob("*.py"):
        if {"sim", "demo"} & set(path.relative_to(ROOT / "agentpool").parts):
            continue
        if "config" in path.relative_to(ROOT / "agentpool").parts:
            continue  # settings fields such as "joulie_api", not metrics
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
