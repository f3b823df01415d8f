"""The import contracts (setup.cfg [importlinter]) hold every module of agentpool.

``lint-imports`` checks a contract only against the modules it names: a contract
that lists modules by hand skips, without a word, a module added after it was
written. Here each contract's module expressions are expanded as ``lint-imports``
expands them (grimp's wildcards, each module as a package) and held against the
modules found on disk, so a new module cannot escape a rule.
"""

from __future__ import annotations

import configparser
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "agentpool"

EVERY_MODULE = {"layers", "kubernetes", "product-sim", "sim-product", "acyclic"}
"""The contracts whose rule is about the whole package."""
ONE_PACKAGE = {"worker"}
"""The contracts about what one package may import (the rest is not theirs to name)."""


def contracts() -> dict[str, configparser.SectionProxy]:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    prefix = "importlinter:contract:"
    return {name.removeprefix(prefix): setup[name] for name in setup.sections()
            if name.startswith(prefix)}


def entries(section: configparser.SectionProxy, key: str) -> list[str]:
    return [line.strip() for line in section.get(key, "").splitlines()
            if line.strip() and not line.strip().startswith("#")]


def modules_on_disk() -> set[str]:
    """Every module and package under agentpool/, but the root package itself (its
    ``__init__`` holds the version and imports nothing)."""
    names = set()
    for path in (ROOT / PACKAGE).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names - {PACKAGE}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, include_external_packages=True, cache_dir=None)


def named(graph: grimp.ImportGraph, expressions: list[str]) -> set[str]:
    """The modules of agentpool a contract names, each with its descendants (import-linter's
    default); external packages (kubernetes, click) are left out."""
    found: set[str] = set()
    for expression in expressions:
        matches = graph.find_matching_modules(expression) if "*" in expression else {expression}
        for module in matches:
            if module == PACKAGE or module.startswith(f"{PACKAGE}."):
                found |= {module} | set(graph.find_descendants(module))
    return found


def contract_modules(graph: grimp.ImportGraph, section: configparser.SectionProxy) -> set[str]:
    if section["type"] == "layers":
        containers = entries(section, "containers")
        tails = [tail.strip() for layer in entries(section, "layers")
                 for tail in layer.replace("|", ":").split(":")]
        return named(graph, [f"{c}.{t}" for c in containers for t in tails])
    if section["type"] == "acyclic_siblings":
        return named(graph, entries(section, "ancestors"))
    return named(graph, entries(section, "source_modules") + entries(section, "forbidden_modules"))


def test_every_contract_is_known_to_this_test() -> None:
    # A new contract is one of the two kinds on purpose, not by default.
    assert set(contracts()) == EVERY_MODULE | ONE_PACKAGE


def test_the_graph_holds_every_module_on_disk(graph: grimp.ImportGraph) -> None:
    assert modules_on_disk() <= graph.modules


@pytest.mark.parametrize("contract", sorted(EVERY_MODULE))
def test_every_module_is_under_the_contract(graph: grimp.ImportGraph, contract: str) -> None:
    missing = modules_on_disk() - contract_modules(graph, contracts()[contract])
    assert not missing, f"{contract} does not name {sorted(missing)}"


def test_the_layers_must_name_every_module_themselves() -> None:
    # lint-imports then refuses a top-level module or folder that is in no layer.
    layers = contracts()["layers"]
    assert entries(layers, "containers") == [PACKAGE]
    assert layers.getboolean("exhaustive")
