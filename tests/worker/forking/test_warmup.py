"""The fork server's warm-up: every tick path taken once, nothing of it left behind."""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path

import pytest
from prometheus_client import values

from agentpool.backends import fencing
from agentpool.backends.sysfs.cpufreq import discover_policies
from agentpool.backends.sysfs.rapl import discover_package_zones
from agentpool.results import Backend, Result
from agentpool.worker.forking.warmup import (
    REHEARSED,
    TICKS,
    canned_server,
    environment,
    host_tree,
    rehearse_worker,
    warm_up,
)


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


def _wakeup_fd() -> int:
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    return fd


def _process_state() -> tuple[object, ...]:
    root = logging.getLogger()
    return (
        sorted(os.listdir("/proc/self/fd")),
        os.environ.get("PROMETHEUS_MULTIPROC_DIR"),
        values.ValueClass,
        list(root.handlers),
        root.level,
        logging.getLogger("urllib3").level,
        fencing.horizon(),
        _wakeup_fd(),
        threading.active_count(),
    )


@pytest.mark.parametrize("backend", REHEARSED)
def test_a_rehearsed_worker_runs_its_loop_until_told_to_stop(backend: str) -> None:
    # One message a tick (a report or "ticked"), the inputs changed and a fence taken
    # half-way, stopped by a StopWorker: the loop a worker runs, in this process.
    with environment() as stage, canned_server() as endpoint:
        assert rehearse_worker(stage, endpoint, backend) == TICKS


def test_warm_up_leaves_the_process_as_it_found_it() -> None:
    before = _process_state()
    warm_up()
    # No descriptor (socket, mmapped metrics file), variable or handler reaches a worker.
    assert _process_state() == before
