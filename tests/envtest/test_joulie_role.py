"""agentpool's image as the agent of Joulie's own chart, on a real kube-apiserver.

Joulie's chart runs its agent as ``joulie-agent`` with Joulie's agent ClusterRole
(``tests/support/joulie_chart.py``): at c38b80d nodes, nodetwins and nodehardwares only; no
Events, no Leases, nothing on the profile API's kinds, whose CRDs a cluster keeps after
an upgrade (Helm never deletes CRDs; every chart CRD is served here). With Joulie's
environment (pool mode, NodeTwin API, routing by ``TELEMETRY_*``) the agent must
enforce and report, and say once, in its log and in ``/readyz``'s detail, what that
role keeps from it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentpool.config.options import JoulieApi
from agentpool.kube.api import KubeApi, Resource, load_client
from agentpool.kube.selection import ACCESS_RECHECK_S, KindDiscovery
from agentpool.sim.cluster import SimCluster
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.objects import twin_name
from agentpool.sim.polling import wait_until
from tests.support.agents import live_worker_pids, restarts
from tests.support.chart import NAMESPACE
from tests.support.clock import Clock
from tests.support.joulie_chart import AGENT_ENV, AGENT_RULES, SERVICE_ACCOUNT, agent_rbac, pool_env

NPP, TP, NT, NHW = (
    Resource.NODE_POWER_PROFILES, Resource.TELEMETRY_PROFILES, Resource.NODE_TWINS,
    Resource.NODE_HARDWARES,
)
ROLE = "joulie-agent-envtest"
NAMESPACE_OBJECT = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}


@contextlib.contextmanager
def joulie_account(server: EnvtestServer, revision: str) -> Iterator[tuple[str, str]]:
    """Joulie's agent ServiceAccount, bound to its agent ClusterRole of ``revision``."""
    objects = [NAMESPACE_OBJECT, *agent_rbac(NAMESPACE, revision, ROLE)]
    admin = server.api()
    admin.apply(objects)
    try:
        yield NAMESPACE, SERVICE_ACCOUNT
    finally:
        for obj in reversed(objects[1:]):
            admin.delete(f"{obj['kind']}.{obj['apiVersion']}", obj["metadata"]["name"],
                         obj["metadata"].get("namespace"))


@pytest.mark.parametrize(
    ("revision", "watched", "forbidden"),
    [("c38b80d", {NT, NHW}, {NPP, TP}), ("b9a50b1", {NPP, TP}, {NT, NHW})],
)
def test_discovery_leaves_the_kinds_joulies_role_does_not_grant_unwatched(
    envtest_server: EnvtestServer, tmp_path: Path, revision: str,
    watched: set[Resource], forbidden: set[Resource],
) -> None:
    with SimCluster(server=envtest_server), joulie_account(envtest_server, revision) as account:
        config = envtest_server.service_account_kubeconfig(tmp_path / "kubeconfig", *account)
        api = KubeApi(load_client(str(config)))
        added: list[Resource] = []
        removed: list[Resource] = []
        clock = Clock(100.0)
        discovery = KindDiscovery(api, JoulieApi.AUTO, added.append, removed.append,
                                  clock=clock)
        try:
            discovery.discover()
            assert set(added) == watched
            assert discovery.forbidden == forbidden
            assert discovery.problem is None
            assert discovery.note is not None
            assert all(f"{k.value}.joulie.io" in discovery.note for k in forbidden)
            if revision != "c38b80d":
                return
            # Granted later (the operator's chart upgraded): watched within a recheck.
            rules: list[dict[str, Any]] = [
                *AGENT_RULES[revision],
                {"apiGroups": ["joulie.io"], "resources": ["nodepowerprofiles"],
                 "verbs": ["get", "list", "watch"]},
            ]
            envtest_server.api().patch(
                "clusterrole.rbac.authorization.k8s.io/v1", ROLE, {"rules": rules})

            def picked_up() -> bool:
                clock.now += ACCESS_RECHECK_S
                discovery.discover()
                return NPP in added

            wait_until(picked_up, 20)  # RBAC's own cache follows the role within moments
            assert discovery.forbidden == {TP}
            assert removed == []
        finally:
            api.close()


def test_agentpool_under_joulies_agent_role_and_env_enforces_and_reports(
    envtest_server: EnvtestServer,
) -> None:
    nodes = ["jr-0", "jr-1", "jr-2"]
    with joulie_account(envtest_server, "c38b80d") as account, SimCluster(
        server=envtest_server, service_account=account, api="nodetwin"
    ) as cluster:
        for name in nodes:
            cluster.add_node(name)
        env = pool_env(1, {**AGENT_ENV, "RECONCILE_INTERVAL": "1s", **cluster.routing_env()})
        env.pop("METRICS_ADDR")  # the test's free port (SimCluster's), not :8080
        agent = cluster.start_agent({**env, "POD_NAME": "joulie-agent-pool-0"})
        try:
            wait_until(lambda: all(cluster.status(n).get("result") == "applied"
                                   for n in nodes), 60)
        except TimeoutError as exc:
            raise AssertionError(f"{agent.get('/readyz')}\n{agent.logs()[-3000:]}") from exc
        # Enforcing: each cap reached the node's control endpoint; a change follows.
        assert {cluster.power.state(n).cap_watts for n in nodes} == {120.0}
        changed_at = time.monotonic()
        cluster.set_cap("jr-1", 90)
        wait_until(lambda: any(
            r.body and r.body.get("capWatts") == 90 and r.monotonic >= changed_at
            for r in cluster.power.requests(node="jr-1", kind="control")), 30)
        # Reporting: NodeTwin status and a NodeHardware per node.
        wait_until(lambda: all(cluster.api.get("nodehardwares", twin_name(n)).get("status")
                               for n in nodes), 30)
        # What the role forbids is said in /readyz's detail, the pod stays ready ...
        code, body = agent.get("/readyz")
        assert code == 200, body
        assert body.startswith("ok; ")
        assert "not watched: nodepowerprofiles.joulie.io, telemetryprofiles.joulie.io" in body
        wait_until(lambda: "Node events are not recorded" in agent.get("/readyz")[1], 30)
        # ... and once in the log, however many events were dropped for it.
        logs = agent.logs()
        assert logs.count("Node events are not recorded") == 1, logs
        assert logs.count("not watched: nodepowerprofiles") == 1, logs
        # No informer ever asked for what the role does not grant; no worker restarted.
        assert "list nodepowerprofiles: HTTP 403" not in logs
        assert "list telemetryprofiles: HTTP 403" not in logs
        live_worker_pids(agent, nodes)
        assert [restarts(agent, n) for n in nodes] == [0, 0, 0]
        assert agent.terminate() == 0
