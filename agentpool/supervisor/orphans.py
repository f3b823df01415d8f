"""PID 1 duty: reap orphaned processes, never the children multiprocessing owns.

In a container the supervisor is usually PID 1, so every orphan in the pod
(a worker whose fork server died, anything a worker spawned) is re-parented
to it and stays a zombie unless it is reaped. ``waitid(WNOWAIT)`` peeks at
the next exited child without reaping it, so the fork server and the
resource tracker, which multiprocessing itself waits for, are left alone.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def multiprocessing_helpers() -> set[int]:
    """Pids of the fork server and resource tracker (private attributes, read defensively)."""
    from multiprocessing import forkserver, resource_tracker

    pids = {
        getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None),
        getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None),
    }
    return {p for p in pids if isinstance(p, int)}


def reap_orphans(pid1: bool | None = None) -> int:
    """Reap exited orphans when we are PID 1; returns how many were reaped."""
    if not (os.getpid() == 1 if pid1 is None else pid1):
        return 0
    reaped = 0
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return reaped
        if info is None or info.si_pid == 0:
            return reaped
        if info.si_pid in multiprocessing_helpers():
            # Its owner reaps it; a dead fork server is restarted at the next spawn.
            return reaped
        os.waitpid(info.si_pid, 0)
        reaped += 1
        log.info("reaped orphan pid %d", info.si_pid)
