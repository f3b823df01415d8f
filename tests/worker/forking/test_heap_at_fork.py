"""Nothing holding a file or a socket is reachable from the fork server's heap when it forks.

Every worker starts as a copy of that heap: a socket, file or selector the
preload or warm-up left there would be shared by every worker (its
descriptor, if still open; a stale one the worker might close or write to
otherwise). The real fork server, started by the real client, runs with a
``sitecustomize`` of this test's on its path (the test build): in each worker
it forks, before anything of the worker runs, an at-fork handler walks the
heap the worker inherited (every object the collector tracks, frozen ones
included, every module and the forking frames' locals) and writes down each
object that holds a descriptor. Only the allow-list below may be there.
"""

from __future__ import annotations

import json
import os
from multiprocessing.connection import Pipe, wait
from pathlib import Path

import pytest

from agentpool.config.settings import Settings
from agentpool.sim.polling import wait_until
from agentpool.supervisor.forkclient import ForkServer

DEADLINE_S = 60.0
"""The walk takes about a second here; a loaded CI box may take many times that."""

ALLOWED = {
    "standard stream": "stdin, stdout and stderr: a worker logs to stderr as the server does",
    "the server's socket": "closed in the worker before it runs (descriptors.close_all); "
                           "the object is never used there, and never finalised (frozen)",
    "the server's selector": "its epoll descriptor, closed in the worker the same way",
}
"""What may hold a descriptor in the heap a worker inherits, and why that is harmless."""

SITECUSTOMIZE = r'''
"""The test build's hook (tests/worker/forking/test_heap_at_fork.py); imported at start-up."""
import gc, io, json, os, sys

if os.environ.get("HEAP_AT_FORK_LEAK"):  # the check's own check: a leak it must report
    import socket
    LEAKED = socket.socket()


def _fd(obj):
    """The descriptor ``obj`` holds open, or None."""
    if isinstance(obj, type) or not callable(getattr(type(obj), "fileno", None)):
        return None
    if getattr(obj, "closed", False) is True:
        return None
    try:
        fd = obj.fileno()
    except (OSError, ValueError, io.UnsupportedOperation, TypeError, AttributeError):
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


def _walk(frame):
    gc.unfreeze()  # this worker's own copy: the frozen objects are listed again
    pending = gc.get_objects() + list(sys.modules.values())
    while frame is not None:
        pending.append(frame.f_locals)
        frame = frame.f_back
    seen = {id(pending)}
    found = []
    while pending:
        obj = pending.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        fd = _fd(obj)
        if fd is not None:
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = "closed"
            found.append({"type": f"{type(obj).__module__}.{type(obj).__qualname__}",
                          "fd": fd, "target": target})
        pending.extend(gc.get_referents(obj))
    return found


def _after_fork_in_child():
    caller = sys._getframe(1)
    if caller.f_code.co_name != "_fork" or not caller.f_code.co_filename.endswith(
            os.path.join("forking", "server.py")):
        return  # the preload's rehearsals fork too: only a worker's fork counts
    report = {"control": int(sys.argv[1]), "holders": _walk(caller)}
    path = os.environ["HEAP_AT_FORK_REPORT"]
    with open(path + ".tmp", "w") as out:
        json.dump(report, out)
    os.rename(path + ".tmp", path)


os.register_at_fork(after_in_child=_after_fork_in_child)
'''


def _role(holder: dict[str, object], control: int) -> str | None:
    fd, target = holder["fd"], holder["target"]
    if fd in (0, 1, 2):
        return "standard stream"
    if fd == control and str(holder["type"]) in ("socket.socket", "_socket.socket"):
        return "the server's socket"
    if target == "anon_inode:[eventpoll]" and holder["type"] in (
            "select.epoll", "selectors.EpollSelector"):
        return "the server's selector"
    return None


def _heap_at_fork(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, leak: bool) -> dict[
    str, object
]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    report = tmp_path / "heap.json"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("HEAP_AT_FORK_REPORT", str(report))
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    if leak:
        monkeypatch.setenv("HEAP_AT_FORK_LEAK", "1")
    server = ForkServer()
    try:
        assert server.wait_ready(DEADLINE_S)
        ours, theirs = Pipe(duplex=True)
        try:
            worker = server.spawn("heap", Settings(reconcile_interval_s=60.0).worker(), None,
                                  None, theirs.fileno())
        finally:
            theirs.close()
        try:
            wait_until(report.exists, DEADLINE_S)
        finally:
            worker.terminate()
            wait([worker.sentinel], DEADLINE_S)
            worker.close()
            ours.close()
    finally:
        server.stop()
    result: dict[str, object] = json.loads(report.read_text())
    return result


def test_nothing_but_the_allowed_holds_a_descriptor_in_a_workers_inherited_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _heap_at_fork(tmp_path, monkeypatch, leak=False)
    control = result["control"]
    holders = result["holders"]
    assert isinstance(control, int)
    assert isinstance(holders, list)
    roles = [_role(h, control) for h in holders]
    refused = [h for h, role in zip(holders, roles, strict=True) if role not in ALLOWED]
    assert refused == [], refused
    # The walk sees the heap at all: the server's own socket is in it.
    assert "the server's socket" in roles, holders


def test_a_socket_left_in_the_fork_servers_heap_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _heap_at_fork(tmp_path, monkeypatch, leak=True)
    control = result["control"]
    holders = result["holders"]
    assert isinstance(control, int)
    assert isinstance(holders, list)
    refused = [h for h in holders if _role(h, control) is None]
    assert [h["type"] for h in refused] == ["socket.socket"], holders
