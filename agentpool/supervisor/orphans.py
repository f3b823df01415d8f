"""PID 1 duty: reap orphaned processes, never a child whose owner reaps it.

In a container the supervisor is usually PID 1, so every orphan in the pod
(a worker whose fork server died, anything a worker spawned) is re-parented
to it and stays a zombie unless it is reaped. ``waitid(WNOWAIT)`` peeks at
the next exited child without reaping it, so the fork server (reaped by
:class:`agentpool.supervisor.forkclient.ForkServer`, which registers its pid
in :data:`spare_pids`) is left alone.
"""

from __future__ import annotations

import contextlib
import logging
import os

log = logging.getLogger(__name__)

spare_pids: set[int] = set()
"""Children whose owner reaps them itself (the fork server): never reaped as orphans."""


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
        if info.si_pid in spare_pids:
            # Its owner reaps it (a dead fork server is restarted at the next spawn), but it
            # hides any orphan that exited after it from the peek: look at each child.
            return reaped + _reap_each_child(set(spare_pids))
        os.waitpid(info.si_pid, 0)
        reaped += 1
        log.info("reaped orphan pid %d", info.si_pid)


def _reap_each_child(spare: set[int]) -> int:
    """Reap every exited child but ``spare``, one pid at a time (a scan of /proc)."""
    import psutil

    reaped = 0
    for child in psutil.Process().children():
        if child.pid in spare:
            continue
        with contextlib.suppress(ChildProcessError):
            pid, _ = os.waitpid(child.pid, os.WNOHANG)
            if pid:
                reaped += 1
                log.info("reaped orphan pid %d", pid)
    return reaped
