"""New series wait in memory while the metrics directory has no room (rules: metricspace.py).

"No room" is a reserve larger than any filesystem here has free; the real full tmpfs,
and the SIGBUS it means without this, is tests/faults/test_disk.py's. The files are
read back with prometheus_client's own MultiProcessCollector.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, values
from prometheus_client.multiprocess import MultiProcessCollector

from agentpool.worker.metricspace import MetricsRoom, room_checked
from agentpool.worker.nodefiles import METRICS_FILE_BYTES, metrics_id

NO_FILESYSTEM_HAS_THIS = 1 << 62


def _read(directory: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, str(directory))  # type: ignore[no-untyped-call]
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
    }


@pytest.fixture
def factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[MetricsRoom, Any]:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    room = MetricsRoom(str(tmp_path), "n1", reserve=NO_FILESYSTEM_HAS_THIS)
    in_files = values.MultiProcessValue(  # type: ignore[no-untyped-call]
        process_identifier=lambda: metrics_id("n1")
    )
    return room, room_checked(in_files, room)


def _gauge(make: Any, name: str) -> Any:
    return make("gauge", name, name, ("node",), ("n1",), "a gauge", multiprocess_mode="livesum")


def _counter(make: Any, name: str) -> Any:
    return make("counter", name, name + "_total", ("node",), ("n1",), "a counter")


def test_series_made_without_room_are_written_once_there_is_room(
    factory: tuple[MetricsRoom, Any], tmp_path: Path
) -> None:
    room, make = factory
    gauge, counter = _gauge(make, "g"), _counter(make, "c")
    _counter(make, "late")  # never touched: written at 0 like any new counter
    gauge.set(3.0)
    gauge.inc(0.5)
    counter.inc(2)
    counter.inc(1)
    assert (gauge.get(), counter.get()) == (3.5, 3.0)
    # The node's files exist, allocated, and hold nothing yet.
    sizes = {p.name: p.stat().st_size for p in tmp_path.glob("*.db")}
    assert set(sizes.values()) == {METRICS_FILE_BYTES}, sizes
    assert all(p.stat().st_blocks * 512 >= METRICS_FILE_BYTES for p in tmp_path.glob("*.db"))
    assert _read(tmp_path) == {}
    room.settle()  # still no room: nothing written, nothing lost
    assert _read(tmp_path) == {}
    assert len(room.waiting) == 3

    room.reserve = 0
    room.settle()
    assert room.waiting == []
    read = _read(tmp_path)
    assert read[("g", (("node", "n1"),))] == 3.5
    assert read[("c_total", (("node", "n1"),))] == 3.0
    assert read[("late_total", (("node", "n1"),))] == 0.0
    # From now on the waiting values write through.
    gauge.set(7.0)
    counter.inc(4)
    read = _read(tmp_path)
    assert read[("g", (("node", "n1"),))] == 7.0
    assert read[("c_total", (("node", "n1"),))] == 7.0
    # A new series with room goes straight to the files.
    _gauge(make, "direct").set(1.0)
    assert _read(tmp_path)[("direct", (("node", "n1"),))] == 1.0
    assert room.waiting == []


def test_a_gauge_set_after_increments_keeps_the_value_set(
    factory: tuple[MetricsRoom, Any], tmp_path: Path
) -> None:
    room, make = factory
    gauge = _gauge(make, "g")
    gauge.inc(5)
    gauge.set(2.0)
    room.reserve = 0
    room.settle()
    assert _read(tmp_path)[("g", (("node", "n1"),))] == 2.0


def test_no_directory_to_allocate_in_is_no_room(tmp_path: Path) -> None:
    room = MetricsRoom(str(tmp_path / "missing"), "n1", reserve=0)
    assert not room.has_room()
    (tmp_path / "missing").mkdir()
    assert room.has_room()
    assert len(list((tmp_path / "missing").glob("*.db"))) == 3
