"""The agent's one error tree: drawn in errors.py's docstring, every error of the agent in it."""

from __future__ import annotations

import ast
import builtins
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentpool
from agentpool import errors
from agentpool.errors import (
    AgentError,
    KubePermanentError,
    KubeTemporaryError,
    ProtocolError,
)
from agentpool.kube.api import KubeApi, Resource, load_client
from agentpool.sim.apiserver import ApiEmulator

NOT_THE_AGENT = ("agentpool.sim", "agentpool.demo")
"""The simulation kit and the demo stand in for the outside world: their errors are its."""


def drawn_tree() -> dict[str, str]:
    """Each error of the docstring's drawing -> the one it hangs from."""
    doc = errors.__doc__ or ""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in doc.splitlines():
        if (branch := re.search(r"[├└]── (\w+)", line)) is not None:
            depth, name = branch.start() // 4, branch.group(1)
        elif (root := re.fullmatch(r" *(AgentError)", line)) is not None:
            depth, name = 0, root.group(1)
        else:
            continue  # a line of the drawing that continues an error's description
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[name] = stack[-1][1]
        stack.append((depth, name))
    return parents


def agent_sources() -> Iterator[tuple[str, ast.Module]]:
    """(module, its syntax tree) of each of the agent's modules; read, not imported (the
    fork server's modules stay out of pytest's process: tests/conftest.py)."""
    package = Path(agentpool.__file__).parent
    for path in sorted(package.rglob("*.py")):
        name = ".".join(("agentpool", *path.relative_to(package).with_suffix("").parts))
        if not name.startswith(NOT_THE_AGENT):
            yield name, ast.parse(path.read_text(), str(path))


def _exception_base(base: ast.expr) -> bool:
    name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
    builtin = getattr(builtins, name, None)
    return (inspect.isclass(builtin) and issubclass(builtin, BaseException)) or name.endswith(
        ("Error", "Exception"))


def test_the_drawing_is_the_tree() -> None:
    drawn = drawn_tree()
    actual = {
        name: cls.__bases__[0].__name__
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, AgentError) and cls is not AgentError
    }
    assert drawn == actual


def test_every_error_the_agent_defines_is_in_the_tree() -> None:
    elsewhere = [
        f"{name}.{node.name}"
        for name, tree in agent_sources() if name != "agentpool.errors"
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and any(_exception_base(b) for b in node.bases)
    ]
    assert elsewhere == []


def test_both_protocol_errors_share_a_parent_and_no_builtin() -> None:
    assert {cls.__name__ for cls in ProtocolError.__subclasses__()} == {
        "PipeProtocolError", "HttpProtocolError"}
    for cls in (*ProtocolError.__subclasses__(), errors.DisconnectedError):
        assert [c for c in cls.__mro__ if c.__module__ == "builtins"] == [
            Exception, BaseException, object], cls


def test_permanent_and_temporary_kube_failures_are_siblings() -> None:
    assert not issubclass(KubeTemporaryError, KubePermanentError)
    assert not issubclass(KubePermanentError, KubeTemporaryError)


def test_the_api_says_which_failures_a_retry_may_fix(
    api_emulator: ApiEmulator,
) -> None:
    assert api_emulator.kubeconfig is not None
    api = KubeApi(load_client(str(api_emulator.kubeconfig)))
    try:
        with pytest.raises(KubePermanentError, match="404") as missing:
            api.patch_status(Resource.TELEMETRY_PROFILES, "no-such-profile", {"x": 1})
        assert missing.value.status == 404
        api_emulator.inject("patch", "telemetryprofiles", fault="503")
        with pytest.raises(KubeTemporaryError, match="503") as busy:
            api.patch_status(Resource.TELEMETRY_PROFILES, "no-such-profile", {"x": 1})
        assert busy.value.status == 503
    finally:
        api.close()
