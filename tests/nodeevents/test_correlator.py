"""The correlator: client-go's deduplication, aggregation and spam filter, with a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentpool.nodeevents.correlator import (
    COMBINED_PREFIX,
    SIMILAR_MAX,
    Budget,
    EventCorrelator,
    Write,
)
from agentpool.nodeevents.reasons import NodeEvent, Reason

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ev(node: str = "n", note: str = "cap 120 W", reason: Reason = Reason.POWER_CAP_APPLIED
       ) -> NodeEvent:
    return NodeEvent(node, reason, note)


def drain(c: EventCorrelator, now: float, name_of: dict[tuple[object, ...], str]) -> list[Write]:
    """Take what is allowed now and answer every write with success."""
    out = c.writes(now)
    for w in out:
        name = w.name or f"{w.event.node}.{len(name_of)}"
        name_of[w.key] = name
        c.written(w, name)
    return out


def test_a_repeat_patches_the_same_event_with_its_count() -> None:
    c = EventCorrelator(now=0)
    names: dict[tuple[object, ...], str] = {}
    c.observe(ev(), 0, at(0))
    (create,) = drain(c, 0, names)
    assert create.name is None
    assert create.count == 1
    c.observe(ev(), 10, at(10))
    c.observe(ev(), 20, at(20))
    (patch,) = drain(c, 20, names)
    assert patch.name == names[create.key]
    assert (patch.count, patch.first, patch.last) == (3, at(0), at(20))
    assert c.writes(30) == []
    assert c.next_due(30) is None


def test_the_node_budget_defers_and_folds_repeats_into_the_count() -> None:
    c = EventCorrelator(node_budget=Budget(burst=2, refill_s=300), now=0)
    names: dict[tuple[object, ...], str] = {}
    for i in range(5):
        c.observe(ev(note=f"cap {i}"), i, at(i))
    written = drain(c, 5, names)
    assert [w.event.note for w in written] == ["cap 0", "cap 1"]
    for t in (6, 7, 8):
        c.observe(ev(note="cap 2"), t, at(t))
    assert drain(c, 9, names) == []
    assert c.next_due(9) == 305  # one token per 5 minutes after the first writes at t=5
    assert drain(c, 304, names) == []
    (late,) = drain(c, 305, names)
    assert (late.event.note, late.count) == ("cap 2", 4)  # 1 first + 3 repeats, not lost
    assert c.dropped == 0


def test_a_thousand_flapping_nodes_stay_within_the_pod_budget() -> None:
    c = EventCorrelator(node_budget=Budget(25, 300), pod_budget=Budget(100, 1.0), now=0)
    names: dict[tuple[object, ...], str] = {}
    writes = 0
    hour = 3600
    for t in range(0, hour, 20):  # every node flips its cap every 20 s tick
        for n in range(1000):
            c.observe(ev(f"node-{n}", f"cap {120 + 80 * ((t // 20) % 2)} W"), t, at(t))
        writes += len(drain(c, t, names))
    assert writes <= 100 + hour / 1.0
    assert writes >= 0.9 * hour  # the budget is used, not starved


def test_more_than_ten_different_notes_are_combined_on_one_event() -> None:
    c = EventCorrelator(node_budget=Budget(1000, 1), pod_budget=Budget(1000, 1), now=0)
    names: dict[tuple[object, ...], str] = {}
    for i in range(SIMILAR_MAX + 5):
        c.observe(ev(note=f"telemetry: timeout after {i} ms", reason=Reason.POWER_CAP_ERROR),
                  i, at(i))
    written = drain(c, 20, names)
    combined = [w for w in written if w.event.note.startswith(COMBINED_PREFIX)]
    assert len(written) == SIMILAR_MAX + 1
    assert len(combined) == 1
    assert combined[0].count == 5
    assert combined[0].event.note == COMBINED_PREFIX + "telemetry: timeout after 10 ms"
    # Another reason, or another node, is not combined with these.
    c.observe(ev(note="x", reason=Reason.POWER_CAP_BLOCKED), 21, at(21))
    c.observe(ev(node="m", note="telemetry: timeout after 99 ms",
                 reason=Reason.POWER_CAP_ERROR), 21, at(21))
    assert [w.event.note for w in drain(c, 21, names)] == ["x", "telemetry: timeout after 99 ms"]
    # After a quiet window, notes count afresh.
    c.observe(ev(note="telemetry: new", reason=Reason.POWER_CAP_ERROR), 700, at(700))
    assert [w.event.note for w in drain(c, 700, names)] == ["telemetry: new"]


def test_an_expired_event_is_created_again_with_the_whole_count() -> None:
    c = EventCorrelator(now=0)
    names: dict[tuple[object, ...], str] = {}
    c.observe(ev(), 0, at(0))
    drain(c, 0, names)
    c.observe(ev(), 4000, at(4000))
    (patch,) = c.writes(4000)
    assert patch.name is not None
    c.failed(patch, 4000, 0.0, gone=True)
    (create,) = c.writes(4000)
    assert create.name is None
    assert create.count == 2


def test_a_failed_write_is_retried_later_and_a_refused_one_dropped() -> None:
    c = EventCorrelator(now=0)
    c.observe(ev(), 0, at(0))
    (w,) = c.writes(0)
    c.failed(w, 0, retry_in=5.0)
    assert c.writes(1) == []
    assert c.next_due(1) == 5.0
    (again,) = c.writes(5)
    c.failed(again, 5, retry_in=None)
    assert c.pending() == 0
    assert c.dropped == 1


def test_memory_is_bounded_and_an_evicted_pending_event_is_counted_as_dropped() -> None:
    c = EventCorrelator(node_budget=Budget(1, 1e9), max_series=100, now=0)
    for n in range(1000):
        c.observe(ev(f"node-{n}"), 0, at(0))
        c.observe(ev(f"node-{n}", note="second"), 0, at(0))
    stats = c.stats()
    assert stats["series"] == 100
    assert c.dropped == 1900
    assert c.observed == 2000
