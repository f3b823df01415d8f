"""The outside judge of elastic pools: double control from the request log and /metrics."""

from __future__ import annotations

from agentpool.sim.poolwatch import pod_of, request_overlaps, worker_nodes
from agentpool.sim.power.model import RecordedRequest, RequestKind


def req(t: float, pod: str, node: str = "n") -> RecordedRequest:
    return RecordedRequest(node, "POST", RequestKind.CONTROL, f"/control/{node}", None, t, t,
                           None, f"agentpool/0.1.0 ({pod}, shard 0)")


def test_clean_handoffs_and_a_quick_handback_are_no_overlap() -> None:
    log = ([req(t, "A") for t in (0, 1, 2, 3)] + [req(t, "B") for t in (3.3, 4.3, 5.3)]
           + [req(t, "A") for t in (6.0, 7.0)])
    assert request_overlaps(log, 1.5) == []


def test_two_workers_ticking_at_once_overlap_for_as_long_as_they_do() -> None:
    log = [req(t, "A") for t in (0, 1, 2, 3, 4)] + [req(t, "B") for t in (2.5, 3.5, 4.5)]
    found = request_overlaps(log, 1.5)
    instants = sorted(t for t, _, _ in found)
    assert {(node, pods) for _, node, pods in found} == {("n", ("A", "B"))}
    # B holds from 2.5 to 4.5, A until 4: about 1.5 s of overlap, sampled every 100 ms.
    assert 14 <= len(instants) <= 16
    assert instants[0] >= 2.5
    assert instants[-1] < 4.0


def test_requests_of_others_and_before_since_are_ignored() -> None:
    log = [req(t, "A") for t in (0, 1, 2)] + [req(t, "B") for t in (0.5, 1.5)]
    assert request_overlaps(log, 1.5, since=10.0) == []
    other = RecordedRequest("n", "GET", RequestKind.TELEMETRY, "/telemetry/n", None, 0.7, 0.7,
                            None, "curl/8")
    assert request_overlaps([*log[:3], other], 1.5) == []
    assert pod_of("agentpool/0.1.0 (pool-3, shard 3)") == "pool-3"
    assert pod_of("Python-urllib/3.11") is None


def test_worker_nodes_reads_the_worker_pid_series() -> None:
    text = ('# TYPE agentpool_worker_pid gauge\n'
            'agentpool_worker_pid{node="a"} 12.0\nagentpool_worker_pid{node="b"} 13.0\n'
            '# TYPE agentpool_workers gauge\nagentpool_workers{state="running"} 2.0\n')
    assert worker_nodes(text) == {"a", "b"}


def test_the_judge_works_ownership_out_on_its_own_and_agrees_with_the_agent() -> None:
    from agentpool.pool.assignment import Assignment, owner_of
    from agentpool.sim.poolwatch import expected_owner

    # fnv32a("a") = 0xe40c292c (the contract's vector): 3826002220 % 3 == 1.
    assert expected_owner("a", ["p-2", "p-0", "p-1"], "modulo") == "p-1"
    members = [f"pool-{i}" for i in range(5)]
    for node in (f"kwok-node-{i}" for i in range(300)):
        for assignment in Assignment:
            assert expected_owner(node, members, assignment) == owner_of(node, members, assignment)
