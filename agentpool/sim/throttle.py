"""A real process whose forks are made slow: one child at most per period.

Stands in for a machine where a fork takes hundreds of milliseconds (a heap
whose page tables take that long to copy, memory pressure), which cannot be
had here on demand. The process itself is untouched: a thread watches its
children, and each time one more appears it stops the process (SIGSTOP) for
the rest of the period, then lets it go on (SIGCONT). Between forks it runs
freely.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from types import TracebackType

import psutil

POLL_S = 0.001
"""How often the children are counted: a fork or two may slip through between looks."""


class SlowForks:
    """Let ``pid`` fork at most about one child per ``period_s``, until the ``with`` block
    ends (then it runs freely again)."""

    def __init__(self, pid: int, period_s: float) -> None:
        self.pid = pid
        self.period_s = period_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slow-forks", daemon=True)

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # it may be gone: nothing to slow
            os.kill(self.pid, signum)

    def _children(self) -> set[int]:
        # The kernel's list is one small file; psutil would scan every process of the host.
        try:
            with open(f"/proc/{self.pid}/task/{self.pid}/children", encoding="ascii") as f:
                return {int(pid) for pid in f.read().split()}
        except FileNotFoundError:  # gone, or a kernel without CONFIG_PROC_CHILDREN
            try:
                return {child.pid for child in psutil.Process(self.pid).children()}
            except psutil.Error:
                return set()

    def _run(self) -> None:
        seen = self._children()
        while not self._done.is_set():
            now = self._children()
            if now - seen:
                self._signal(signal.SIGSTOP)
                self._done.wait(self.period_s)
                self._signal(signal.SIGCONT)
            seen = now
            time.sleep(POLL_S)

    def __enter__(self) -> SlowForks:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._done.set()
        self._thread.join()
        self._signal(signal.SIGCONT)
