"""Orphan reaping, with a real orphan: a child subreaper stands in for PID 1."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import ctypes, os, sys, time
    from agentpool.supervisor.orphans import reap_orphans

    PR_SET_CHILD_SUBREAPER = 36
    # Like PID 1 in a container, this process now inherits its descendants' orphans.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    middle = os.fork()
    if middle == 0:
        if os.fork() == 0:
            time.sleep(0.2)  # outlive the parent, then exit as an orphan
            os._exit(0)
        os._exit(0)
    os.waitpid(middle, 0)
    deadline = time.monotonic() + 10
    reaped = 0
    while reaped == 0 and time.monotonic() < deadline:
        reaped = reap_orphans(pid1=True)
        time.sleep(0.05)
    print(reaped, reap_orphans(pid1=False))
    """
)


def test_an_orphan_is_reaped_when_we_are_pid1() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30, check=True
    )
    assert out.stdout.split() == ["1", "0"]
