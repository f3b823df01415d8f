"""How a worker's process ended, in words: its exit status, and whether the OOM killer ended it.

A SIGKILL alone does not say who sent it: an operator, the supervisor itself (a hung
worker; the table knows those and does not ask), or the kernel's OOM killer at the
pod's memory limit. The kernel counts the OOM killer's kills in the memory cgroup
(``oom_kill`` in ``memory.events``, or ``memory.oom_control`` in cgroup v1), the
same count the kubelet reads to say ``OOMKilled``. So a SIGKILL while that count
went up since the last one explained is an OOM kill, and each kill explains one
death: two workers killed together are both told, a later kill by hand is not (a
kill the supervisor sent itself takes its share and is told as the supervisor's).
A kill of another process of the pod (the fork server) may be taken for the next
SIGKILL of a worker; without a memory cgroup nothing is.
"""

from __future__ import annotations

import signal

from agentpool.supervisor.handles import describe_exit
from agentpool.supervisor.memcgroup import MemoryCgroup
from agentpool.supervisor.memlimit import mib

OOM_KILLED = "OOMKilled"
"""The word a death by the OOM killer begins with, as the kubelet's container status says."""


class Deaths:
    """Decodes workers' exit statuses. Not thread safe: the loop's thread only."""

    def __init__(self, cgroup: MemoryCgroup | None) -> None:
        self.cgroup = cgroup
        self._explained = cgroup.oom_kills() if cgroup is not None else None
        """OOM kills counted by the cgroup that a death was put down to (or before start)."""

    def describe(self, exitcode: int | None, expected: bool = False) -> str:
        """How the process ended (``describe_exit``), with :data:`OOM_KILLED` in front when
        the OOM killer did it. ``expected``: the supervisor stopped or killed it itself."""
        how = describe_exit(exitcode)
        # A kill the supervisor expected still takes its share of the count: the OOM
        # killer may have been first, and the kill must not be put down to another death.
        if exitcode != -signal.SIGKILL or not self._oom_kill() or expected:
            return how
        assert self.cgroup is not None
        limit = self.cgroup.limit_bytes()
        at = f"the pod's memory limit of {mib(limit)}" if limit is not None else "out of memory"
        return f"{OOM_KILLED}: {how} by the kernel's OOM killer, {at}"

    def _oom_kill(self) -> bool:
        """Whether the cgroup counted an OOM kill no death was put down to yet (and now is)."""
        if self.cgroup is None:
            return False
        count = self.cgroup.oom_kills()
        if count is None or self._explained is None or count < self._explained:
            self._explained = count  # unreadable, or the cgroup is a new one
            return False
        if count == self._explained:
            return False
        self._explained += 1
        return True
