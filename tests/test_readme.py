"""README.md and docs/ must not drift from the code: settings, commands, modules, metrics, links.

The configuration table of docs/configuration.md is checked row by row
against ``config.OPTIONS`` (the table ``agentpool --help`` is generated
from), the README's quick-start commands must stay the two documented set-up
commands and list every demo flag, every path the README's code map names
must exist, every metric the agent exports must be in docs/metrics.md, the
simulation-kit example of docs/development.md must actually run, and every
relative link of the README, docs/ and BENCHMARKS.md must lead to a file
(and heading) that exists, with every docs/ page in the README's index.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentpool.config.options import OPTIONS, Option

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()


def _page(name: str) -> str:
    return (DOCS / name).read_text()


def _section(text: str, title: str) -> str:
    """The ``## title`` section of a page, up to the next ``## `` heading."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _row(opt: Option) -> str:
    default = f"`{opt.default}`" if opt.default is not None else "(unset)"
    return f"| `{opt.env}` | `{opt.flag}` | {default} | {opt.help} |"


def test_every_setting_has_its_row_in_the_configuration_table() -> None:
    table = _section(_page("configuration.md"), "Every option")
    missing = [_row(opt) for opt in OPTIONS if _row(opt) not in table]
    # The message is the rows to paste, so fixing the page is one copy.
    assert not missing, (
        "docs/configuration.md's table is missing or has outdated rows:\n" + "\n".join(missing)
    )
    documented = re.findall(r"^\| `([A-Z_]+)` \| `--", table, re.MULTILINE)
    assert documented == [opt.env for opt in OPTIONS]  # same order, nothing extra


def test_quick_start_is_the_two_setup_commands() -> None:
    quick = _section(README, "Quick start")
    assert "\n    bash scripts/demo\n" in quick
    assert "\n    bash scripts/check\n" in quick
    assert quick.index("bash scripts/demo") < quick.index("bash scripts/check")
    for script in ("scripts/demo", "scripts/check"):
        assert (ROOT / script).is_file()


def test_demo_flags_are_documented() -> None:
    from agentpool.cli import demo

    flags = [opt for param in demo.params for opt in param.opts]
    quick = _section(README, "Quick start")
    assert flags
    for flag in flags:
        assert f"| `{flag}` |" in quick, flag


def test_architecture_names_only_paths_that_exist() -> None:
    architecture = _section(README, "Architecture")
    tree = re.search(r"```\n(agentpool/\n.*?)```", architecture, re.DOTALL)
    assert tree
    folders = re.findall(r"^  (\w+)/ ", tree[1], re.MULTILINE)
    assert folders
    missing = [f"{folder}/" for folder in folders
               if not (ROOT / "agentpool" / folder / "__init__.py").is_file()]
    named = set(re.findall(r"(?<![\w/.])(\w+\.py|\w+/)(?=[\s,):])", tree[1])) - {"agentpool/"}
    every = {p.relative_to(ROOT / "agentpool") for p in (ROOT / "agentpool").rglob("*")}
    # A name in the tree is a file or folder somewhere under agentpool/ (most are
    # inside the folder on their line).
    missing += [name for name in sorted(named)
                if not any(p.name == name.rstrip("/") for p in every)]
    # The "where to look" table names paths relative to agentpool/.
    for path in re.findall(r"`((?:\w+/)*\w+(?:\.py|/))`", architecture.split("```")[-1]):
        if not (ROOT / "agentpool" / path).exists():
            missing.append(path)
    assert not missing, f"in the README's code map, not under agentpool/: {sorted(set(missing))}"


def test_every_exported_metric_is_documented() -> None:
    names: set[str] = set()
    for path in (ROOT / "agentpool").rglob("*.py"):
        if {"sim", "demo"} & set(path.relative_to(ROOT / "agentpool").parts):
            continue
        if "config" in path.relative_to(ROOT / "agentpool").parts:
            continue  # settings fields such as "joulie_api", not metrics
        names |= set(re.findall(r'"((?:joulie|agentpool)_[a-z_]+)"', path.read_text()))
    metrics = _page("metrics.md")
    assert names
    # Counters are exported with a _total suffix; the page lists the exported name.
    assert sorted(n for n in names if n not in metrics) == []


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


def _links(path: Path) -> list[tuple[str, str]]:
    """The relative links of a page: (target, anchor), code blocks left out."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    found = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        found.append((file, anchor))
    return found


PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted(DOCS.rglob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    broken = []
    for file, anchor in _links(page):
        target = (page.parent / file).resolve() if file else page
        if not target.exists():
            broken.append(f"{file}#{anchor}" if anchor else file)
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{file}#{anchor}")
    assert not broken, f"broken links in {page.relative_to(ROOT)}: {broken}"


def test_the_readme_indexes_every_docs_page() -> None:
    index = _section(README, "Documentation")
    in_index = set(re.findall(r"\]\((docs/[^)#\s]+)\)", index))
    pages = {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert pages, "docs/ has no page"
    assert not pages - in_index, f"not in the README's index: {sorted(pages - in_index)}"


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_simulation_kit_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = re.search(r"```python\n(.*?)```", _section(_page("development.md"), "Simulation kit"),
                      re.DOTALL)
    assert block
    monkeypatch.chdir(tmp_path)  # it writes ./kubeconfig
    exec(compile(block[1], "docs/development.md (simulation kit)", "exec"), {"__name__": "readme"})
    assert (tmp_path / "kubeconfig").is_file()
