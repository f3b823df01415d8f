"""Room left in the two directories the agent writes, said once in the log and exported.

``PROMETHEUS_MULTIPROC_DIR``: below :data:`~agentpool.worker.metricspace.RESERVE_BYTES`
free, workers put no new series in their files (they would die of SIGBUS writing to
a page the filesystem cannot find), so ``/metrics`` lacks what they found since.
``STATE_DIR``: a worker that cannot journal a host value does not write it, so a
node whose originals are not on record yet is not capped (its status says so).
Both go on as before once space is freed, without a restart. A sampler thread of its
own looks every :data:`CHECK_EVERY_S`, so a filesystem slow to answer ``statfs``
holds up neither the loop nor a scrape; a scrape reads the last look.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentpool.proctitle import name_thread
from agentpool.worker.metricspace import RESERVE_BYTES, free_bytes

log = logging.getLogger(__name__)

CHECK_EVERY_S = 5.0
STATE_LOW_BYTES = 64 * 1024
"""Below this, a node's journal (a few hundred bytes to tens of KiB on a host with
many cpufreq policies, written whole with a temporary copy) may not fit."""


@dataclass(frozen=True)
class WatchedDir:
    variable: str
    """The setting that names it: the ``dir`` label, and how the log names it."""
    path: str
    low_bytes: int
    """Below this free, the directory counts as full."""
    consequence: str
    """What a full one means, for the log."""


def watched_dirs(metrics_dir: str, state_dir: str) -> list[WatchedDir]:
    return [
        WatchedDir("PROMETHEUS_MULTIPROC_DIR", metrics_dir, RESERVE_BYTES,
                   "workers keep enforcing, but put no new series in their metrics files: "
                   "/metrics misses them until space is freed"),
        WatchedDir("STATE_DIR", state_dir, STATE_LOW_BYTES,
                   "a worker that cannot journal a host value's original does not write it: "
                   "nodes not capped yet stay uncapped (status error) until space is freed"),
    ]


class DiskSpace(Collector):
    """Looks at each directory's free space; ``agentpool_dir_free_bytes`` and
    ``agentpool_dir_full``, labelled by the directory's variable."""

    def __init__(self, dirs: list[WatchedDir], every_s: float = CHECK_EVERY_S) -> None:
        self.dirs = dirs
        self._every_s = every_s
        self._lock = threading.Lock()
        self._free: dict[str, int | None] = {}
        """Variable -> free bytes at the last look (None: could not look)."""
        self._full: dict[str, bool] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disk-space", daemon=True)

    def start(self) -> None:
        self.look()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)

    def _run(self) -> None:
        name_thread()
        while not self._stop.wait(self._every_s):
            self.look()

    def look(self) -> None:
        """Read each directory's free space; log a directory that became full or has room
        again."""
        for watched in self.dirs:
            try:
                free: int | None = free_bytes(watched.path)
            except OSError as exc:
                free = None
                problem = exc.strerror or str(exc)
                log.debug("%s %s: cannot read its free space: %s", watched.variable,
                          watched.path, problem)
            full = free is not None and free < watched.low_bytes
            with self._lock:
                was_full = self._full.get(watched.variable, False)
                self._free[watched.variable], self._full[watched.variable] = free, full
            if full and not was_full:
                log.error("%s %s is full (%d bytes free, under %d): %s", watched.variable,
                          watched.path, free, watched.low_bytes, watched.consequence)
            elif was_full and not full and free is not None:
                log.info("%s %s has room again (%d bytes free)", watched.variable,
                         watched.path, free)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            free, full = dict(self._free), dict(self._full)
        free_family = GaugeMetricFamily(
            "agentpool_dir_free_bytes",
            "Free bytes in a directory the agent writes (dir: its variable)", labels=["dir"],
        )
        full_family = GaugeMetricFamily(
            "agentpool_dir_full",
            "1 while a directory the agent writes has too little room: metrics files "
            "(new series wait) or the journal of originals (no new caps)", labels=["dir"],
        )
        for watched in self.dirs:
            value = free.get(watched.variable)
            if value is not None:
                free_family.add_metric([watched.variable], value)
            full_family.add_metric([watched.variable], int(full.get(watched.variable, False)))
        return [free_family, full_family]
