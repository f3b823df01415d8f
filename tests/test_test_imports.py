"""Tests import helpers, never each other (docs/development.md: tests).

A test module that imports another one runs that module's setup and re-exports its
fixtures, and a change to one test breaks another that only borrowed a helper.
The rules, held against every file's import statements:

- no module imports a test module (``test_*.py``) or a ``conftest.py``, and none of
  those re-exports anything through ``__all__``; fixtures a folder shares live in its
  ``conftest.py``;
- what more than one folder uses lives in ``tests/support/``; any other helper module
  serves only its own folder (and the folders below it), and ``tests/`` itself holds
  no helper.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
SUPPORT = ("tests", "support")


def module_of(path: Path) -> tuple[str, ...]:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def file_of(module: tuple[str, ...]) -> Path | None:
    """The file a module of the tests lives in (None: it is not one)."""
    base = ROOT.joinpath(*module)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported(path: Path) -> list[tuple[int, tuple[str, ...]]]:
    """(line, module) of every module of the tests that ``path`` imports."""
    here = module_of(path)
    package = here if path.name == "__init__.py" else here[:-1]
    found: list[tuple[int, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, tuple(alias.name.split("."))) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = base + tuple(node.module.split(".") if node.module else ())
            for alias in node.names:
                # ``from tests.x import y`` imports the module tests.x.y where there is one.
                sub = (*module, alias.name)
                found.append((node.lineno, sub if file_of(sub) else module))
    return sorted({(line, module) for line, module in found if module[:1] == ("tests",)})


def problem(importer: tuple[str, ...], target: tuple[str, ...]) -> str | None:
    name = target[-1]
    if name.startswith("test_") or name == "conftest":
        return "imports a test module or a conftest"
    if target[: len(SUPPORT)] == SUPPORT:
        return None
    folder = target[:-1]
    if folder == ("tests",):
        return "imports a helper of tests/ itself: helpers shared by folders go to tests/support"
    if importer[: len(folder)] != folder:
        return (f"imports a helper of {'/'.join(folder)}: helpers shared by folders go to "
                "tests/support")
    return None


def test_no_test_module_imports_another_and_shared_helpers_live_in_support() -> None:
    wrong = []
    for path in sorted(TESTS.rglob("*.py")):
        for line, target in imported(path):
            why = problem(module_of(path), target)
            if why is not None:
                wrong.append(f"{path.relative_to(ROOT)}:{line} {'.'.join(target)}: {why}")
    assert not wrong, "\n".join(wrong)


def exports(path: Path) -> bool:
    """Whether ``path`` names what it re-exports (``__all__``): a test module has nothing to."""
    return any(
        isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
        and any(isinstance(t, ast.Name) and t.id == "__all__"
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))
        for node in ast.parse(path.read_text(), str(path)).body
    )


def test_no_test_module_or_conftest_re_exports() -> None:
    wrong = [str(path.relative_to(ROOT)) for path in sorted(TESTS.rglob("*.py"))
             if (path.name.startswith("test_") or path.name == "conftest.py") and exports(path)]
    assert not wrong


def test_the_rules_catch_what_they_are_about() -> None:
    # The check itself can fail: each kind of import it refuses, and two it allows.
    assert problem(("tests", "faults", "test_disk"), ("tests", "supervisor", "test_pool"))
    assert problem(("tests", "kube", "test_status"), ("tests", "kube", "conftest"))
    assert problem(("tests", "faults", "test_disk"), ("tests", "e2e", "cluster"))
    assert problem(("tests", "backends", "gpu", "test_nvml"), ("tests", "fake_nvml"))
    assert problem(("tests", "e2e", "test_pool"), ("tests", "e2e", "cluster")) is None
    assert problem(("tests", "faults", "test_disk"), ("tests", "support", "agents")) is None
