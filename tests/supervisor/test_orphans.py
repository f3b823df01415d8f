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


BEHIND_A_HELPER = textwrap.dedent(
    """
    import ctypes, os, sys, time
    from agentpool.supervisor.orphans import reap_orphans, spare_pids

    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    helper = os.fork()
    if helper == 0:
        os._exit(0)
    # The exited child stands for the fork server, which its ForkServer reaps itself.
    spare_pids.add(helper)
    time.sleep(0.2)
    middle = os.fork()
    if middle == 0:
        if os.fork() == 0:
            time.sleep(0.2)
            os._exit(0)
        os._exit(0)
    os.waitpid(middle, 0)
    deadline = time.monotonic() + 5
    reaped = 0
    while reaped == 0 and time.monotonic() < deadline:
        reaped = reap_orphans(pid1=True)
        time.sleep(0.05)
    helper_left = os.waitpid(helper, os.WNOHANG)[0] == helper
    print(reaped, helper_left)
    """
)


def test_an_orphan_behind_an_exited_helper_is_reaped_and_the_helper_left_alone() -> None:
    # The peek sees the helper first: every orphan that exited after it is reaped too.
    out = subprocess.run(
        [sys.executable, "-c", BEHIND_A_HELPER],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert out.stdout.split() == ["1", "True"]
