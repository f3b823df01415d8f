"""PID 1 duty: reap orphaned processes, never the helpers whose owners reap them; and at
exit, stop multiprocessing's helpers if any were started.

In a container the supervisor is usually PID 1, so every orphan in the pod
(a worker whose fork server died, anything a worker spawned) is re-parented
to it and stays a zombie unless it is reaped. ``waitid(WNOWAIT)`` peeks at
the next exited child without reaping it, so the fork server (reaped by
:class:`agentpool.supervisor.forkclient.ForkServer`, which registers its pid
in :data:`spare_pids`) and any multiprocessing helper are left alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading

log = logging.getLogger(__name__)

spare_pids: set[int] = set()
"""Children whose owner reaps them itself (the fork server): never reaped as orphans."""


def multiprocessing_helpers() -> set[int]:
    """Pids of the fork server and, where multiprocessing started them, its helpers (private
    attributes, read defensively)."""
    from multiprocessing import forkserver, resource_tracker

    pids = {
        getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None),
        getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None),
    }
    return {p for p in pids if isinstance(p, int)} | spare_pids


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
            # Its owner reaps it (a dead fork server is restarted at the next spawn), but it
            # hides any orphan that exited after it from the peek: look at each child.
            return reaped + _reap_each_child(multiprocessing_helpers())
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


def stop_helpers(timeout: float = 5.0) -> list[int]:
    """Stop and reap the fork server and the resource tracker (at exit); returns the pids
    that had to be SIGKILLed.

    Each is stopped by multiprocessing's own ``_stop()`` (close its "alive"
    pipe, wait for it), run in a thread so a helper that does not exit cannot
    hold up ours: past ``timeout`` it gets SIGKILL, and ``_stop()`` then reaps it.
    """
    from multiprocessing import forkserver, resource_tracker

    killed = []
    for owner, attr in (
        (getattr(forkserver, "_forkserver", None), "_forkserver_pid"),
        (getattr(resource_tracker, "_resource_tracker", None), "_pid"),
    ):
        pid = getattr(owner, attr, None)
        stop = getattr(owner, "_stop", None)
        if not isinstance(pid, int) or not callable(stop):
            continue
        stopper = threading.Thread(target=stop, name="stop-helper", daemon=True)
        stopper.start()
        stopper.join(timeout)
        if stopper.is_alive():
            log.warning("multiprocessing helper (pid %d) did not stop: SIGKILL", pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            stopper.join(timeout)
    return killed
