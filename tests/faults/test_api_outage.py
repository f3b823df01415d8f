"""Fault 1 (issue 43): the API server crashes, and comes back minutes later as new processes.

kube-apiserver and etcd are SIGKILLed, and started again on the same ports
and data: a new process with a new watch cache, so every watch resumed from
an older resourceVersion is answered 410 Gone and relists. The agent's path
to it refuses connections meanwhile (the fault proxy stands in for the
network, so that a change can be written to the restarted server, as another
apiserver of the control plane would take it, while the agent is still cut off).

What users expect (docs/troubleshooting.md, "The API server is down"):
during the outage every node keeps its cap (nothing released or restored:
the outage is shorter than SPEC_READ_TIMEOUT), ``/readyz`` says what is wrong,
``/healthz`` stays 200, and the log says it once, then at a bounded rate.
After it the watches resume without a relist storm (each kind listed once),
statuses catch up, and the change written during the outage is enforced
within two reconcile intervals.

The outage lasts 30 s here, past the agent's reconnect cap (one interval),
so the retries reach their steady state; the issue's 3 minutes run on demand
(``AGENTPOOL_FAULTS_FULL=1``), and print the figures BENCHMARKS.md quotes.
"""

from __future__ import annotations

import os
import time

import pytest

from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.polling import wait_until
from tests.faults.apipath import CAP_W, RAPL, Probe, assert_probes, complaints, scene

INTERVAL_S = 10.0
NODES = 8
NEW_CAP_W = 77.0
FULL = os.environ.get("AGENTPOOL_FAULTS_FULL") == "1"
ON_DEMAND = pytest.mark.skipif(not FULL, reason="full length, on demand: AGENTPOOL_FAULTS_FULL=1")
DETECTED_S = 5.0
"""The crash cuts every watch at once: /readyz says so by the next probe (measured: at once)."""


@pytest.mark.slow
@pytest.mark.parametrize(
    "outage_s",
    [pytest.param(30.0, id="30s", marks=pytest.mark.timeout(300)),
     pytest.param(180.0, id="3min", marks=[ON_DEMAND, pytest.mark.timeout(600)])],
)
def test_a_crashed_api_server_back_as_new_processes_loses_no_cap_and_costs_no_storm(
    audited_server: EnvtestServer, outage_s: float
) -> None:
    with scene(audited_server, NODES, {"RECONCILE_INTERVAL": f"{INTERVAL_S:g}s"}) as s:
        pids = s.agent.worker_pids()
        changed, blocked = s.nodes[0], s.nodes[1]
        logged_before = len(s.log_lines())
        probes: list[Probe] = []
        start = time.monotonic()
        s.proxy.refuse()
        audited_server.kill()
        # Meanwhile a node's RAPL becomes blocked: DVFS takes over, its status cannot say so.
        s.cluster.power.set_behaviour(blocked, result="blocked", action=RAPL)
        s.probe(2.0, start, start + outage_s / 2, probes)
        audited_server.restart()
        s.cluster.set_cap(changed, NEW_CAP_W)  # through the new server; the agent is cut off
        s.probe(2.0, start, start + outage_s, probes)
        logged_during = len(s.log_lines())
        back, back_wall = time.monotonic(), time.time()
        s.proxy.flow()

        recovered_s = wait_until(
            lambda: s.agent.get("/readyz", timeout=5)[0] == 200 and time.monotonic() - back,
            6 * INTERVAL_S,
        )
        enforced = wait_until(lambda: s.first_sent(changed, back, NEW_CAP_W), 6 * INTERVAL_S)
        wait_until(lambda: (f"{NEW_CAP_W:g} W" in s.cluster.status(changed).get("message", "")
                            and s.cluster.status(blocked).get("backend") == "dvfs"),
                   6 * INTERVAL_S)
        caught_up_s = time.monotonic() - back
        ticking = s.ticking(back - 1.5 * INTERVAL_S, back)
        pids_after = s.agent.worker_pids()
        window_s = 60.0 if FULL else 2 * INTERVAL_S
        time.sleep(max(0.0, back + window_s - time.monotonic()))
        lines = s.log_lines()
    # Once the agent stopped: a watch is in the audit log only once it ended.
    requests = s.requests(back_wall, back_wall + window_s)
    print(f"outage {back - start:.0f}s: ready again after {recovered_s:.1f}s, change enforced "
          f"after {enforced - back:.1f}s, statuses caught up after {caught_up_s:.1f}s; in the "
          f"first {window_s:g}s {sum(requests.values())} requests for {NODES} nodes: "
          f"{dict(requests)}")
    # During: liveness kept, readiness says why, every cap kept, every worker ticking.
    assert_probes(probes, DETECTED_S)
    kept = s.caps_sent(start, back)
    assert kept == {n: {CAP_W} for n in s.nodes}, kept
    assert ticking == set(s.nodes)
    # The log: once at the start, then at most once a minute, once at the end.
    outage_log = lines[logged_before:logged_during]
    said = complaints(outage_log)
    assert said.count("agentpool.kube.reachability") <= 1 + outage_s // 60, outage_log
    assert set(said) == {"agentpool.kube.reachability"}, outage_log
    assert sum("answers again" in line for line in lines[logged_during:]) == 1
    # After: within two intervals (the reconnect backoff takes at most one by design),
    # each kind listed once (the 410 of the new server's watch cache), no worker restarted.
    assert enforced - back <= 2 * INTERVAL_S
    assert caught_up_s <= 2 * INTERVAL_S
    kinds = {what for verb, what in requests if verb == "watch"}
    assert {what: requests[("list", what)] for what in kinds} == dict.fromkeys(kinds, 1), requests
    assert all(requests[("watch", what)] <= 3 for what in kinds), requests
    assert sum(requests.values()) <= 40 + 3 * NODES, requests
    assert pids_after == pids
