"""Fault: kube-apiserver restarts (a control-plane upgrade) while the agent runs.

etcd keeps running; kube-apiserver stops and starts again on the same port
and data, on a fifth of the CPU until it is ready, as on a busy control-plane
node, so that every phase of its start lasts long enough for the agent to
meet it: connections refused, then 503 "server is starting" for custom
resources, 404 for their group version until their discovery is registered,
and ``/readyz`` failing for seconds after that.

What an operator expects: the log says the server is away, then starting,
then answering and ready, and never that Joulie's CRDs should be installed
(they are there); the agent keeps its kinds and its workers, its ``/readyz``
says the API is unreachable while it is (docs/metrics.md) and never blames
the install, and a change made after the restart is enforced.
"""

from __future__ import annotations

import threading
import time

import pytest

from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.polling import wait_until
from tests.faults.apipath import scene

CPU_SHARE = 0.2
NEW_CAP_W = 77.0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_restarting_api_server_is_told_as_starting_not_as_a_missing_install(
    audited_server: EnvtestServer,
) -> None:
    with scene(audited_server, 3, {"RECONCILE_INTERVAL": "1s"}) as s:
        pids = s.agent.worker_pids()
        logged_before = len(s.log_lines())
        probes: list[tuple[int, str]] = []
        stop = threading.Event()

        def probe() -> None:  # as a kubelet would, every half second
            while not stop.wait(0.5):
                probes.append(s.agent.get("/readyz", timeout=5))

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        try:
            audited_server.stop_apiserver()
            wait_until(lambda: probes and probes[-1][0] == 503, 30)
            audited_server.start_apiserver(cpu_share=CPU_SHARE)
            back = time.monotonic()
            wait_until(lambda: probes and probes[-1][0] == 200, 60)
        finally:
            stop.set()
            prober.join(10)
        s.cluster.set_cap(s.nodes[0], NEW_CAP_W)
        wait_until(lambda: s.first_sent(s.nodes[0], back, NEW_CAP_W), 30)
        assert s.agent.worker_pids() == pids
        # Discovery looks at the server's readiness every second while it starts.
        ready = "is ready: discovery goes by what it serves again"
        wait_until(lambda: ready in s.agent.logs(), 10)
        lines = s.log_lines()[logged_before:]
    text = "\n".join(lines)
    assert "install Joulie's CRDs" not in text
    assert "no longer served" not in text
    assert "is starting: /readyz answers HTTP 500" in text, text
    assert sum("answers again" in line for line in lines) == 1, text
    # /readyz: unreachable while it was, never the install; ready again at the end.
    assert any(code == 503 and "unreachable" in why for code, why in probes), probes
    assert all("install" not in why for _, why in probes), probes
    assert probes[-1][0] == 200
