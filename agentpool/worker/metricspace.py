"""A worker's metrics files on a filesystem that fills up: new series wait, nothing dies.

prometheus_client keeps a multiprocess value in an mmap'd file that it lengthens
with ``ftruncate``, a sparse file: the filesystem finds a page only when a value is
first written to it, and a full one (a full tmpfs, the chart's in-memory
``emptyDir`` at its ``sizeLimit``) cannot, so the kernel answers the write with
SIGBUS. A worker would die at its first new series, and again after every restart.

So here a new series goes into the files only while the directory has
:data:`RESERVE_BYTES` free, and the node's files were allocated for real first
(``posix_fallocate``, which says ENOSPC instead of faulting later). Until then the
value lives in the worker's memory, missing from ``/metrics``, and each tick
(:meth:`MetricsRoom.settle`) looks again and writes it once there is room. A series
already in the files goes on being written: its pages exist. The supervisor reports
the same condition, from the same reserve, for the whole pod
(:mod:`agentpool.supervisor.diskspace`).

The reserve covers what one tick of many workers adds at once (a new series is
100 to 300 bytes; a worker's first tick adds a few dozen), so that workers that all
saw room do not exhaust it together.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from agentpool.worker.nodefiles import presize_metrics_files

log = logging.getLogger(__name__)

RESERVE_BYTES = 1 << 20
"""Free bytes the metrics directory must have for a new series to be written to it."""


def free_bytes(directory: str) -> int:
    """Bytes an unprivileged writer may still use in ``directory``'s filesystem."""
    stat = os.statvfs(directory)
    return stat.f_bavail * stat.f_frsize


class MetricsRoom:
    """Whether the node's metrics files may take a new series now, and the series that
    wait for room. Not thread safe (a worker has one thread)."""

    def __init__(self, directory: str, node: str, reserve: int = RESERVE_BYTES) -> None:
        self.directory = directory
        self.node = node
        self.reserve = reserve
        self.waiting: list[WaitingValue] = []
        """Values created while there was no room, oldest first."""
        self._allocated = False
        self._short: str | None = None
        """Why the last look found no room (logged once per episode)."""

    def has_room(self) -> bool:
        """The node's files are allocated (now, if they were not) and the directory has
        the reserve free."""
        try:
            if not self._allocated:
                presize_metrics_files(self.directory, self.node)
                self._allocated = True
            free = free_bytes(self.directory)
        except OSError as exc:
            return self._no_room(f"its metrics files cannot be allocated: {exc.strerror or exc}")
        if free < self.reserve:
            return self._no_room(f"{free} bytes free, under the {self.reserve} a new series needs")
        return True

    def _no_room(self, why: str) -> bool:
        if self._short is None:
            log.warning("node %s: PROMETHEUS_MULTIPROC_DIR %s: %s; its new series wait in "
                        "memory, missing from /metrics, until there is room", self.node,
                        self.directory, why)
        self._short = why
        return False

    def settle(self) -> None:
        """Write the waiting series if there is room now (once a tick; free when none wait)."""
        if not self.waiting or not self.has_room():
            return
        waiting, self.waiting = self.waiting, []
        for value in waiting:
            value.write()
        log.info("node %s: PROMETHEUS_MULTIPROC_DIR has room again: %d waiting series written",
                 self.node, len(waiting))
        self._short = None


class WaitingValue:
    """A value created without room: kept here, then written through the real value class
    once there is room, after which every call goes to that value."""

    __slots__ = ("_args", "_backing", "_kwargs", "_make", "_set", "_stamp", "_sum")

    def __init__(self, make: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        self._make, self._args, self._kwargs = make, args, kwargs
        self._backing: Any = None
        self._set: float | None = None
        """The last value set (a gauge), increments since included."""
        self._stamp: float | None = None
        self._sum = 0.0
        """Increments while nothing was set (a counter, a histogram's buckets)."""

    def write(self) -> None:
        self._backing = backing = self._make(*self._args, **self._kwargs)
        if self._set is not None:
            backing.set(self._set, self._stamp)
        elif self._sum:
            backing.inc(self._sum)

    def inc(self, amount: float) -> None:
        if self._backing is not None:
            self._backing.inc(amount)
        elif self._set is not None:
            self._set += amount
        else:
            self._sum += amount

    def set(self, value: float, timestamp: float | None = None) -> None:
        if self._backing is not None:
            self._backing.set(value, timestamp)
        else:
            self._set, self._stamp = value, timestamp

    def get(self) -> float:
        if self._backing is not None:
            return float(self._backing.get())
        return self._set if self._set is not None else self._sum

    def set_exemplar(self, exemplar: Any) -> None:
        return  # none in multiprocess mode, as prometheus_client's own value

    def get_exemplar(self) -> Any:
        return None


def room_checked(make: Callable[..., Any], room: MetricsRoom) -> Callable[..., Any]:
    """A value class for prometheus_client (``values.ValueClass``): ``make``'s value where
    there is room, else a :class:`WaitingValue` that ``room`` writes later. Only values
    that had to wait cost anything per call."""

    def value(*args: Any, **kwargs: Any) -> Any:
        if room.has_room():
            return make(*args, **kwargs)
        waiting = WaitingValue(make, args, kwargs)
        room.waiting.append(waiting)
        return waiting

    return value
