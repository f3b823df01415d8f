"""The files a node's worker leaves on disk, and their names.

Two kinds, in two directories: the worker's prometheus_client multiprocess
files (``<type>_<id>.db`` in the metrics directory, read by the collector),
and the journal of the host values found before the first write
(``<id>.json`` in the state directory, read back by a restarted worker so it
restores the real originals). ``<id>`` is :func:`metrics_id` of the node, in
both. The supervisor asks this module, never builds a path itself.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from prometheus_client.multiprocess import mark_process_dead

from agentpool.pool.assignment import fnv32a

_UNSAFE = re.compile(r"[^A-Za-z0-9.-]")
METRICS_FILE_KINDS = ("gauge_livesum", "counter", "histogram")
"""prometheus_client's file prefixes of a worker's families (every gauge is ``livesum``)."""
METRICS_FILE_BYTES = 4096
"""The size a new metrics file starts at. prometheus_client makes a new file 64 KiB
(sparse) and maps it whole; the kernel's fault-around then maps up to 16 pages of it into
the worker at the first touch, all counted in the worker's memory, where a worker's
series use 1 to 3 KiB. Given a file that has a size, prometheus_client maps that size,
and doubles it when the series outgrow it."""


def metrics_id(node: str) -> str:
    """A stable, filename-safe stand-in for the pid in prometheus_client's file names.

    Stable per node so that a restarted worker reuses its predecessor's files
    (their number stays bounded however often workers die); the hash keeps
    names unique after unsafe characters are replaced.
    """
    return f"n-{_UNSAFE.sub('_', node)[:80]}-{fnv32a(node):08x}"


def presize_metrics_files(metrics_dir: str, node: str) -> None:
    """Create the node's metrics files at :data:`METRICS_FILE_BYTES` unless they exist
    (a restarted worker keeps its predecessor's, whatever their size), their pages
    allocated: a full filesystem fails this with ENOSPC (an ``OSError``), where a page
    left to be found at the first write through the mapping would be a SIGBUS
    (:mod:`agentpool.worker.metricspace`)."""
    ident = metrics_id(node)
    for kind in METRICS_FILE_KINDS:
        fd = os.open(os.path.join(metrics_dir, f"{kind}_{ident}.db"), os.O_RDWR | os.O_CREAT,
                     0o644)
        try:
            os.posix_fallocate(fd, 0, os.fstat(fd).st_size or METRICS_FILE_BYTES)
        finally:
            os.close(fd)


class NodeFiles:
    """Names and clean-up of every node's files under two directories."""

    def __init__(self, metrics_dir: str, state_dir: str) -> None:
        self.metrics_dir = metrics_dir
        self.state_dir = state_dir

    def journal(self, node: str) -> str:
        """Where the node's worker keeps the original host values."""
        return str(Path(self.state_dir, f"{metrics_id(node)}.json"))

    def worker_gone(self, node: str) -> None:
        """A worker exited: its live-only gauges stop counting (prometheus_client's rule)."""
        mark_process_dead(metrics_id(node), self.metrics_dir)  # type: ignore[no-untyped-call]

    def forget(self, node: str) -> None:
        """The node left this pod: no series and no journal of it stay behind."""
        suffix = f"_{metrics_id(node)}.db"
        for name in os.listdir(self.metrics_dir):
            if name.endswith(suffix):
                Path(self.metrics_dir, name).unlink(missing_ok=True)
        Path(self.journal(node)).unlink(missing_ok=True)
