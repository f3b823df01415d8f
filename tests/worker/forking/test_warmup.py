"""The fork server's warm-up: every tick path taken once, nothing of it left behind."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from prometheus_client import values

from agentpool.backends.sysfs.cpufreq import discover_policies
from agentpool.backends.sysfs.rapl import discover_package_zones
from agentpool.spec.values import Backend, Result
from agentpool.worker.forking.warmup import host_tree, warm_up


def test_host_tree_is_what_the_host_backends_find(tmp_path: Path) -> None:
    host_tree(tmp_path / "rapl", rapl=True)
    host_tree(tmp_path / "dvfs", rapl=False)
    zones = discover_package_zones(tmp_path / "rapl")
    assert [z.label for z in zones if z.limit_file is not None] == ["intel-rapl:0", "intel-rapl:1"]
    assert discover_package_zones(tmp_path / "dvfs") == []
    assert [p.index for p in discover_policies(tmp_path / "dvfs")] == [0, 1, 2, 3]


def test_warm_up_takes_every_tick_path() -> None:
    paths = {node: (r.backend, r.result) for node, r in warm_up().items()}
    assert paths == {
        "warm-rapl": (Backend.RAPL, Result.APPLIED),
        "warm-dvfs": (Backend.DVFS, Result.APPLIED),
        "warm-http": (Backend.DVFS, Result.APPLIED),
        "warm-http-rapl": (Backend.RAPL, Result.APPLIED),
        "warm-http-dvfs": (Backend.DVFS, Result.APPLIED),
    }


def _process_state() -> tuple[object, ...]:
    root = logging.getLogger()
    return (
        sorted(os.listdir("/proc/self/fd")),
        os.environ.get("PROMETHEUS_MULTIPROC_DIR"),
        values.ValueClass,
        list(root.handlers),
        root.level,
    )


def test_warm_up_leaves_the_process_as_it_found_it() -> None:
    before = _process_state()
    warm_up()
    # No descriptor (socket, mmapped metrics file), variable or handler reaches a worker.
    assert _process_state() == before
