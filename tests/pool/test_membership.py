"""Pool membership from leases, judged on the observer's clock (docs/modes.md: elastic pool)."""

from __future__ import annotations

import pytest

from agentpool.pool.assignment import Assignment
from agentpool.pool.membership import (
    LeaseRecord,
    MemberTracker,
    assignment_members,
    decode_claims,
    desired_nodes,
    encode_claims,
    view_digest,
)


def rec(name: str, renewal: str = "r1", claims: frozenset[str] = frozenset(),
        holder: str | None = "self", view: str = "") -> LeaseRecord:
    return LeaseRecord(name, name if holder == "self" else holder, 10.0, renewal, claims, view)


def test_claims_round_trip_and_stay_compact() -> None:
    nodes = {f"kwok-node-{i}" for i in range(5000)}
    text = encode_claims(nodes)
    assert text.startswith("z1:")
    assert decode_claims(text) == nodes
    assert len(text) < 40_000  # far below the 256 KiB annotation limit
    assert encode_claims([]) == ""
    assert decode_claims("") == frozenset()


@pytest.mark.parametrize("bad", ["node-a,node-b", "z1:***", "z1:aGVsbG8="])
def test_malformed_claims_are_a_value_error(bad: str) -> None:
    with pytest.raises(ValueError, match="claims"):
        decode_claims(bad)


def test_a_lease_is_live_for_its_duration_after_its_renewal_was_seen() -> None:
    tracker = MemberTracker(grace_s=5.0)
    tracker.observe([rec("p-0"), rec("p-1")], now=100.0)
    assert tracker.live(109.9) == {"p-0", "p-1"}
    # p-0 renews (its renewTime changes); p-1 does not.
    tracker.observe([rec("p-0", "r2"), rec("p-1")], now=108.0)
    assert tracker.live(110.0) == {"p-0"}
    assert tracker.live(117.9) == {"p-0"}
    assert tracker.live(118.0) == set()


def test_an_expired_members_claims_block_until_the_grace_has_passed() -> None:
    tracker = MemberTracker(grace_s=5.0)
    tracker.observe([rec("p-0", claims=frozenset({"a"})), rec("me")], now=0.0)
    assert tracker.claims_of_others("me", 12.0) == {"p-0": frozenset({"a"})}
    assert tracker.claims_of_others("me", 14.9) == {"p-0": frozenset({"a"})}
    assert tracker.claims_of_others("me", 15.0) == {}


def test_a_released_lease_is_neither_live_nor_claiming() -> None:
    tracker = MemberTracker(grace_s=5.0)
    tracker.observe([rec("p-0", holder=None, claims=frozenset({"a"}))], now=0.0)
    assert tracker.live(0.0) == set()
    assert tracker.claims_of_others("me", 0.0) == {}


def test_a_vanished_lease_is_forgotten() -> None:
    tracker = MemberTracker(grace_s=5.0)
    tracker.observe([rec("p-0")], now=0.0)
    tracker.observe([], now=1.0)
    assert tracker.live(1.0) == set()


def test_pods_at_or_beyond_replicas_get_no_nodes() -> None:
    live = ["pool-4", "pool-0", "pool-1", "pool-2", "pool-3"]
    assert assignment_members(live, None) == [f"pool-{i}" for i in range(5)]
    assert assignment_members(live, 2) == ["pool-0", "pool-1"]


def test_desired_nodes_and_view_digest() -> None:
    nodes = [f"n-{i}" for i in range(100)]
    members = ["pool-0", "pool-1"]
    mine = desired_nodes(nodes, members, "pool-0", Assignment.RENDEZVOUS)
    theirs = desired_nodes(nodes, members, "pool-1", Assignment.RENDEZVOUS)
    assert mine | theirs == set(nodes)
    assert not mine & theirs
    assert desired_nodes(nodes, members, "pool-7", Assignment.RENDEZVOUS) == set()
    assert view_digest(["pool-1", "pool-0"], Assignment.MODULO) == view_digest(
        members, Assignment.MODULO)
    assert view_digest(members, Assignment.MODULO) != view_digest(members, Assignment.RENDEZVOUS)
    assert len(view_digest(members, Assignment.MODULO)) == 8


def test_pool_metrics_describe_this_pods_view() -> None:
    from prometheus_client.registry import CollectorRegistry

    from agentpool.pool.handoff import NodePhase
    from agentpool.pool.state import PoolNumbers
    from agentpool.supervisor.elastic import pool_metrics

    numbers = PoolNumbers(members_seen=3, members=("p-0", "p-1"), view="0badcafe",
                          to_acquire=2, to_release=1, disagreeing=1, fenced=False)
    phases = {"n1": NodePhase.RUNNING, "n2": NodePhase.RELEASING}

    class Collector:
        def collect(self):  # type: ignore[no-untyped-def]
            return pool_metrics(numbers, phases, 8.5)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())  # type: ignore[arg-type]
    value = registry.get_sample_value
    assert value("agentpool_pool_members_seen") == 3
    assert value("agentpool_pool_view_member", {"member": "p-1"}) == 1
    assert value("agentpool_pool_view_info", {"view": "0badcafe"}) == 1
    assert (value("agentpool_pool_nodes_to_acquire"), value("agentpool_pool_nodes_to_release")) == (
        2, 1)
    assert value("agentpool_pool_view_disagreement") == 1
    assert value("agentpool_pool_fenced") == 0
    assert value("agentpool_pool_node_phase", {"node": "n2", "phase": "releasing"}) == 1
    assert value("agentpool_pool_takeover_bound_seconds") == 8.5
    # Before the first read only the bound is known.
    first = [m.name for m in pool_metrics(None, {}, 8.5)]
    assert first == ["agentpool_pool_takeover_bound_seconds"]


def test_a_peers_claims_block_for_the_grace_it_published_not_ours() -> None:
    # A rolling update raised SHUTDOWN_TIMEOUT: the new pod's workers may restore for
    # 60 s after their fence, and its claims must block that long, whatever ours is.
    tracker = MemberTracker(grace_s=5.0)
    slow = LeaseRecord("p-0", "p-0", 10.0, "r1", frozenset({"a"}), grace_s=61.0)
    tracker.observe([slow, rec("me")], now=0.0)
    assert tracker.claims_of_others("me", 15.0) == {"p-0": frozenset({"a"})}
    assert tracker.claims_of_others("me", 70.9) == {"p-0": frozenset({"a"})}
    assert tracker.claims_of_others("me", 71.0) == {}
    # A quicker one is taken over sooner; one that publishes none gets ours.
    quick = LeaseRecord("p-1", "p-1", 10.0, "r1", frozenset({"b"}), grace_s=1.0)
    tracker.observe([quick, rec("p-2", claims=frozenset({"c"}))], now=100.0)
    assert tracker.claims_of_others("me", 111.0) == {"p-2": frozenset({"c"})}
    assert tracker.claims_of_others("me", 115.0) == {}


def test_undecodable_claims_block_every_node_until_expiry_plus_grace() -> None:
    # A newer agent may publish claims this one cannot read: it must not lose its nodes.
    tracker = MemberTracker(grace_s=5.0)
    newer = LeaseRecord("p-9", "p-9", 10.0, "r1", claims_error="claims do not start with 'z1:'")
    tracker.observe([newer], now=0.0)
    assert tracker.claims_of_others("me", 0.0) == {"p-9": None}
    assert tracker.claims_of_others("me", 14.9) == {"p-9": None}
    assert tracker.claims_of_others("me", 15.0) == {}


def test_grace_round_trips_and_bad_values_are_errors() -> None:
    from agentpool.pool.membership import decode_grace, encode_grace

    assert decode_grace(encode_grace(21.0)) == 21.0
    assert decode_grace(encode_grace(0.5)) == 0.5
    assert decode_grace(None) is None
    assert decode_grace("") is None
    for bad in ("soon", "-1", "nan", "inf"):
        with pytest.raises(ValueError, match="grace"):
            decode_grace(bad)


def test_desired_nodes_are_computed_again_only_when_nodes_or_members_change() -> None:
    from agentpool.pool.membership import DesiredNodes

    desired = DesiredNodes("pool-0", Assignment.RENDEZVOUS)
    nodes = frozenset(f"n-{i}" for i in range(100))
    members = ["pool-0", "pool-1"]
    first = desired(nodes, members)
    assert first == desired_nodes(nodes, members, "pool-0", Assignment.RENDEZVOUS)
    for _ in range(5):
        assert desired(nodes, list(members)) == first
    assert desired.computed == 1
    assert desired(nodes | {"n-new"}, members) >= first
    assert desired(nodes, ["pool-0"]) == nodes
    assert desired.computed == 3


def test_pool_state_turns_do_not_recompute_an_unchanged_view() -> None:
    from agentpool.pool.state import PoolState

    state = PoolState("pool-0", Assignment.RENDEZVOUS, 10.0, 2.0, 5.0)
    state.written(0.0, state.next_write())
    state.read(state.handoff.writes, [rec("pool-0"), rec("pool-1")], 0.1)
    nodes = frozenset(f"n-{i}" for i in range(50))
    for step in range(20):
        state.turn(nodes, 0.2 + step * 0.01)
    assert state._desired.computed == 2  # the read (no nodes yet), then these nodes once
