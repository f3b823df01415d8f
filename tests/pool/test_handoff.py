"""The handoff rules (docs/modes.md: elastic pool), one by one and then model-checked.

The first part drives :class:`~agentpool.pool.handoff.Handoff` by hand with a fake
clock. The second runs whole pools of production
:class:`~agentpool.pool.state.PoolState` objects in :mod:`.model` through
random schedules of renewals, reads, stops, crashes, restarts, partitions,
graceful exits, rescaling and loops that stop turning for a while (their
workers then stop on their own fences), checking after every step that no
node is controlled by two pods, and that a pool left alone converges to
exactly one controller per node, the one the assignment names. The last
part shows the model would catch a pool without those fences, with grace
judged locally, or with clocks further apart than the fence inequality
assumes.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from agentpool.pool.assignment import Assignment, owner_of
from agentpool.pool.fence import CLOCK_RATE_ERROR
from agentpool.pool.handoff import Actions, Handoff, NodePhase

from .model import DURATION_S, GRACE_S, RENEW_S, DoubleControlError, Pod, World


def fresh(resumed: tuple[str, ...] = ()) -> Handoff:
    return Handoff(duration_s=10.0, renew_interval_s=2.0, resumed=resumed)


def claim_and_publish(h: Handoff, nodes: set[str], now: float) -> None:
    h.want(nodes, now)
    h.published(now, h.claims())


# -- one pod, by hand ---------------------------------------------------------------------


def test_nothing_starts_before_the_claim_is_published_and_read_back() -> None:
    h = fresh()
    h.published(0.0, h.claims())  # the lease exists, renewed at t=0
    assert h.want({"a"}, 0.1) == Actions()
    assert h.phase("a") is NodePhase.CLAIMING
    # A read begun before the claim was published proves nothing.
    assert h.read(h.writes, {}, 0.2) == Actions()
    before = h.writes
    h.published(0.3, h.claims())
    assert h.phase("a") is NodePhase.CLAIMED
    assert h.read(before, {}, 0.4) == Actions()
    assert h.read(h.writes, {}, 0.5) == Actions(start=frozenset({"a"}))
    assert h.phase("a") is NodePhase.RUNNING


def test_a_claim_written_in_a_request_that_did_not_carry_it_stays_unpublished() -> None:
    h = fresh()
    h.published(0.0, frozenset())
    h.want({"a"}, 0.1)
    h.published(0.2, frozenset())  # a request built before "a" was wanted
    assert h.phase("a") is NodePhase.CLAIMING
    assert h.read(h.writes, {}, 0.3) == Actions()


def test_a_node_another_pod_still_claims_waits_for_its_release() -> None:
    h = fresh()
    h.published(0.0, frozenset())
    claim_and_publish(h, {"a", "b"}, 1.0)
    assert h.read(h.writes, {"pool-0": {"a"}}, 1.1) == Actions(start=frozenset({"b"}))
    assert h.phase("a") is NodePhase.CLAIMED
    assert h.claims() == {"a", "b"}  # still claimed: the releasing pod sees it
    assert h.read(h.writes, {"pool-0": set()}, 1.2) == Actions(start=frozenset({"a"}))


def test_losing_a_node_stops_it_and_keeps_the_claim_until_the_stop_is_confirmed() -> None:
    h = fresh()
    h.published(0.0, frozenset())
    claim_and_publish(h, {"a"}, 0.5)
    h.read(h.writes, {}, 0.6)
    assert h.want(set(), 1.0) == Actions(stop=frozenset({"a"}))
    assert h.phase("a") is NodePhase.RELEASING
    assert h.claims() == {"a"}
    # Wanting it back while it stops does not restart it: the stop must finish first.
    assert h.want({"a"}, 1.1) == Actions()
    assert h.read(h.writes, {}, 1.2) == Actions()
    h.stopped("a")
    assert h.claims() == set()
    h.want({"a"}, 1.3)
    assert h.phase("a") is NodePhase.CLAIMING


def test_a_lost_node_never_started_is_dropped_at_once() -> None:
    h = fresh()
    h.published(0.0, frozenset())
    claim_and_publish(h, {"a"}, 0.5)
    assert h.want(set(), 0.6) == Actions()
    assert h.claims() == set()


def test_without_renewal_workers_stop_one_renew_interval_before_the_lease_expires() -> None:
    h = fresh()
    h.published(0.0, frozenset())
    claim_and_publish(h, {"a"}, 1.0)
    h.read(h.writes, {}, 1.0)
    # Last successful renewal sent at 1.0: fence at 1.0 + 10 - 2 = 9.0.
    assert h.fence_at() == pytest.approx(9.0)
    assert h.fence(8.99) == Actions()
    assert h.fence(9.0) == Actions(stop=frozenset({"a"}))
    assert h.want({"a"}, 9.1) == Actions()  # still wanted, but nothing runs while fenced
    assert h.read(h.writes, {}, 9.2) == Actions()
    h.stopped("a")
    # A renewal gets through again: the node is claimed anew and starts after a read.
    h.want({"a"}, 9.5)
    h.published(9.5, h.claims())
    assert not h.fenced(9.6)
    assert h.read(h.writes, {}, 9.6) == Actions(start=frozenset({"a"}))


def test_nothing_runs_before_the_first_renewal() -> None:
    h = fresh()
    assert h.fenced(0.0)
    h.want({"a"}, 0.0)
    assert h.read(h.writes, {}, 0.1) == Actions()


def test_a_restarted_pod_resumes_its_claims_after_one_renewal_and_one_read() -> None:
    h = fresh(resumed=("a", "b"))
    assert h.claims() == {"a", "b"}
    assert h.phase("a") is NodePhase.CLAIMED
    h.want({"a", "b"}, 0.0)
    # A read before this incarnation renewed the lease does not count.
    assert h.read(h.writes, {}, 0.0) == Actions()
    h.published(0.1, h.claims())
    assert h.read(h.writes, {}, 0.2) == Actions(start=frozenset({"a", "b"}))


def test_a_restarted_pod_gives_way_where_another_took_over_meanwhile() -> None:
    h = fresh(resumed=("a", "b"))
    h.want({"a", "b"}, 0.0)
    h.published(0.1, h.claims())
    assert h.read(h.writes, {"pool-1": {"a"}}, 0.2) == Actions(start=frozenset({"b"}))


def test_the_lease_must_outlast_the_renew_interval() -> None:
    with pytest.raises(ValueError, match="exceed"):
        Handoff(duration_s=2.0, renew_interval_s=2.0)


# -- whole pools, model-checked ------------------------------------------------------------


NODES = [f"n{i}" for i in range(8)]
PODS = [f"pool-{i}" for i in range(3)]


def assert_converged(world: World) -> None:
    live = sorted(p.name for p in world.live_pods())
    members = [m for m in live if world.replicas is None or int(m.split("-")[1]) < world.replicas]
    controllers = world.controllers()
    for node in NODES:
        assert controllers[node] == [owner_of(node, members, world.assignment)], (
            node, controllers[node], "\n".join(world.log[-40:]))


@pytest.mark.parametrize("assignment", list(Assignment))
def test_scaling_2_3_5_2_hands_every_node_over_once(assignment: Assignment) -> None:
    world = World(NODES, assignment)
    names = [f"pool-{i}" for i in range(5)]
    for size in (2, 3, 5, 2):
        world.set_replicas(size)
        for name in names[:size]:
            if name not in world.pods or not world.pods[name].alive:
                world.start(name)
        world.settle(30.0)
        for name in names[size:]:
            if name in world.pods and world.pods[name].alive:
                # Scaled away: it handed its nodes over already; now the kubelet stops it.
                assert not world.pods[name].controlling()
                world.exit_gracefully(name)
        assert_converged(world)


def test_a_crashed_pods_nodes_are_taken_over_within_the_documented_bound() -> None:
    world = World(NODES)
    for name in PODS:
        world.start(name)
    world.settle(20.0)
    victim = world.pods["pool-1"]
    lost = set(victim.running)
    assert lost
    world.crash("pool-1")
    crashed_at = world.now
    while any(not world.controllers()[n] for n in lost):
        world.round()
        world.advance(0.5)
        assert world.now - crashed_at < DURATION_S + GRACE_S + 2 * RENEW_S + 1.0
    # Taken over no earlier than its lease expiry plus the grace.
    assert world.now - crashed_at >= DURATION_S + GRACE_S - RENEW_S
    world.start("pool-1")  # back under the same name: nothing doubly controlled
    world.settle(30.0)
    assert_converged(world)


def test_a_pod_restarted_quickly_resumes_its_nodes_without_waiting() -> None:
    world = World(NODES)
    for name in PODS:
        world.start(name)
    world.settle(20.0)
    mine = set(world.pods["pool-2"].running)
    world.crash("pool-2")
    world.advance(1.0)
    world.start("pool-2")
    world.round()  # one renewal, one read
    assert world.pods["pool-2"].running == mine


def test_a_partitioned_pod_stops_its_workers_before_others_take_over() -> None:
    world = World(NODES)
    for name in PODS:
        world.start(name)
    world.settle(20.0)
    cut = world.pods["pool-0"]
    cut.partitioned = True
    # World.check() raises DoubleControlError at the first overlap.
    world.settle(40.0)
    assert not cut.controlling()
    cut.partitioned = False
    world.settle(30.0)
    assert_converged(world)


@pytest.mark.parametrize("assignment", list(Assignment))
@pytest.mark.parametrize("seed", range(100))
def test_random_schedules_never_control_a_node_twice_and_then_converge(
    seed: int, assignment: Assignment
) -> None:
    rng = random.Random(seed)
    world = World(NODES, assignment)
    for name in PODS:
        world.start(name)
    for _ in range(400):
        world.random_step(rng, PODS)
    # Heal: everyone up and reachable, then leave the pool alone.
    for name in PODS:
        pod = world.pods[name]
        pod.partitioned = False
        if not pod.alive:
            world.start(name)
    world.settle(60.0)
    assert_converged(world)


def test_pods_disagreeing_on_the_view_never_both_start_a_node_with_requests_in_flight() -> None:
    # pool-0 saw replicas=1 (it alone is a member and wants every node), pool-1 has not
    # seen it yet (both are members): both want pool-1's share, the worst case.
    world = World(NODES)
    world.start("pool-0")
    world.start("pool-1")
    a, b = world.pods["pool-0"], world.pods["pool-1"]
    world._apply(a, a.state.set_replicas(1, a.clock(world.now)))
    for pod in (a, b):
        world.write(pod.name)
    for pod in (a, b):
        world.read(pod.name)
    contested = b.state.handoff.claims()
    assert contested
    assert contested <= a.state.handoff.claims()
    world.begin_read(a)  # begun before pool-0 publishes its claims...
    world.serve_read(a)  # ...and answered before pool-1 publishes its own
    world.write("pool-1")
    world.read("pool-1")
    assert b.running == contested
    world.send_write(a)
    world.commit_write(a, acknowledged=True)
    world.ack_write(a)
    world.deliver_read(a)  # World.check() raises DoubleControlError if this started anything
    assert not a.running
    world.read("pool-0")  # a read begun after its claims were published
    assert a.running == set(NODES) - contested


# -- who a node was taken over from (its NodeTakenOver event) --------------------------------


def test_a_node_handed_over_names_the_pod_it_was_taken_over_from() -> None:
    world = World(NODES)
    world.set_replicas(2)
    for name in PODS[:2]:
        world.start(name)
    world.settle(20.0)
    for name in PODS[:2]:
        world.pods[name].state.takeovers()  # the first start took nothing from anyone
    before = {node: c[0] for node, c in world.controllers().items()}
    world.set_replicas(3)
    world.start("pool-2")
    world.settle(30.0)
    moved = {n for n, c in world.controllers().items() if c == ["pool-2"]}
    assert moved
    assert world.pods["pool-2"].state.takeovers() == {n: before[n] for n in moved}
    # Asked once: the next answer has only what was taken since.
    assert world.pods["pool-2"].state.takeovers() == {}


def test_a_crashed_pods_nodes_are_reported_taken_over_from_it() -> None:
    world = World(NODES)
    for name in PODS:
        world.start(name)
    world.settle(20.0)
    for pod in world.pods.values():
        assert pod.state.takeovers() == {}
    lost = set(world.pods["pool-1"].running)
    world.crash("pool-1")
    world.settle(40.0)
    taken = {**world.pods["pool-0"].state.takeovers(), **world.pods["pool-2"].state.takeovers()}
    assert taken == dict.fromkeys(lost, "pool-1")
    # A pod restarted under its own name resumes its claims: not a takeover from anyone.
    world.start("pool-1")
    world.settle(30.0)
    got_back = world.pods["pool-1"].state.takeovers()
    assert set(got_back) <= lost
    assert set(got_back.values()) <= {"pool-0", "pool-2"}


def test_a_pod_whose_claims_are_unknown_blocks_every_start() -> None:
    h = fresh()
    h.published(0.0, frozenset())
    claim_and_publish(h, {"a", "b"}, 0.1)
    assert h.read(h.writes, {"pool-9": None, "pool-1": {"a"}}, 0.2) == Actions()
    assert h.read(h.writes, {"pool-1": {"a"}}, 0.3) == Actions(start=frozenset({"b"}))


def test_after_a_lapse_claims_published_before_it_count_no_more() -> None:
    h = fresh()
    h.published(0.0, frozenset())
    claim_and_publish(h, {"a"}, 0.5)
    before_lapse = h.writes
    # The loop stalled: the next renewal is sent after the fence (0.5 + 10 - 2 = 8.5).
    h.published(20.0, h.claims())
    assert h.phase("a") is NodePhase.CLAIMED
    # A read begun before that renewal proves nothing about who took "a" meanwhile.
    assert h.read(before_lapse, {}, 20.1) == Actions()
    assert h.read(h.writes, {}, 20.2) == Actions(start=frozenset({"a"}))


# -- loops that stop turning (a stopped supervisor, a system call that never returns) -----


def two_pods(world: World, **starts: dict[str, float]) -> tuple[Pod, Pod]:
    for name in ("pool-0", "pool-1"):
        world.start(name, **starts.get(name, {}))
    world.settle(20.0)
    first, second = world.pods["pool-0"], world.pods["pool-1"]
    assert first.running
    assert second.running
    return first, second


def test_a_stalled_loops_workers_stop_on_their_own_before_anyone_takes_over() -> None:
    world = World(NODES)
    _, stalled = two_pods(world)
    mine = set(stalled.running)
    world.stall("pool-1", 45.0)
    # World.check() raises DoubleControlError at the first overlap.
    world.settle(40.0)
    assert not stalled.controlling()
    assert set(world.pods["pool-0"].running) >= mine  # taken over meanwhile
    world.settle(30.0)  # the loop turns again: it rejoins as a newcomer
    assert_converged(world)


def test_without_worker_fences_a_stalled_loop_means_two_controllers() -> None:
    world = World(NODES, fences=False)
    two_pods(world)
    world.stall("pool-1", 45.0)
    with pytest.raises(DoubleControlError):
        world.settle(40.0)


@pytest.mark.parametrize("publish_grace", [True, False])
def test_a_peer_is_waited_for_with_the_grace_it_published(publish_grace: bool) -> None:
    # A rolling update gave pool-1 a SHUTDOWN_TIMEOUT of 20 s; pool-0 still has 1 s.
    world = World(NODES, publish_grace=publish_grace)
    two_pods(world, **{"pool-0": {"shutdown": 1.0}, "pool-1": {"shutdown": 20.0}})
    world.stall("pool-1", 60.0)
    if publish_grace:
        world.settle(50.0)
        assert not world.pods["pool-1"].controlling()
    else:
        with pytest.raises(DoubleControlError):
            world.settle(50.0)


@pytest.mark.parametrize(("rate_error", "safe"), [(CLOCK_RATE_ERROR, True), (0.2, False)])
def test_clocks_within_the_assumed_rate_error_keep_the_fence_safe(
    rate_error: float, safe: bool
) -> None:
    # The stalled pod's clock slow, the taker's fast: the worst case the inequality covers.
    world = World(NODES)
    two_pods(world, **{"pool-0": {"rate": 1 + rate_error}, "pool-1": {"rate": 1 - rate_error}})
    world.stall("pool-1", 60.0)
    if safe:
        world.settle(50.0)
    else:
        with pytest.raises(DoubleControlError):
            world.settle(50.0)


@pytest.mark.parametrize("seed", range(150))
def test_random_stalls_never_control_a_node_twice_and_then_converge(seed: int) -> None:
    world = chaos(seed)
    for name in PODS:
        pod = world.pods[name]
        pod.partitioned = False
        pod.stalled_until = 0.0
        if not pod.alive:
            world.start(name)
    world.settle(90.0)
    assert_converged(world)


def chaos(seed: int, **world: Any) -> World:
    rng = random.Random(seed)
    made = World(NODES, shutdowns=(0.5, 4.0, 20.0), seed=seed, **world)
    for name in PODS:
        made.start(name)
    for _ in range(400):
        made.random_step(rng, PODS, stalls=True)
    return made


@pytest.mark.parametrize("broken", [{"fences": False}, {"publish_grace": False},
                                    {"rate_error": 0.2}])
def test_random_stalls_find_the_overlap_when_a_safeguard_is_missing(broken: dict[str, Any]) -> None:
    # The model has teeth: without worker fences, with peers judging each other's grace by
    # their own, or with clocks 200 times further apart than the inequality assumes, some
    # schedule of the ones above controls a node twice.
    for seed in range(150):
        try:
            chaos(seed, **broken)
        except DoubleControlError:
            return
    pytest.fail(f"no double control found with {broken}")
