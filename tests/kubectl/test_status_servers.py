"""``agentpool status`` (the kubectl plugin) against the emulator and a real kube-apiserver.

A small cluster is seeded by hand (an elastic pool's Leases, nodes on both
Joulie APIs, statuses with known times) and the real command runs as a
subprocess with the user's kubeconfig and a fixed ``--now``, so its output is
compared byte for byte with the golden files in ``golden/``. The real agent
then runs a static pool of 2 shards, and the command must agree with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentpool.pool.membership import ANNOTATION_CLAIMS, LABEL_POOL, encode_claims
from agentpool.sim.apiserver.errors import ApiError
from agentpool.sim.cluster import KINDS, SimCluster
from agentpool.sim.envtest import EnvtestServer
from agentpool.sim.objects import power_profile, telemetry_profile
from agentpool.sim.polling import wait_until
from tests.support.agents import worker_pids
from tests.support.apiservers import Backend
from tests.support.chart import CHART_DIR, load_helm, one, parse_manifests

GOLDEN = Path(__file__).parent / "golden"
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
POOL_NS = "joulie-system"
MANAGED = {"joulie.io/managed": "true"}


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease(pod: str, renewed_ago: float, claims: set[str]) -> dict[str, Any]:
    return {
        "metadata": {"name": pod, "namespace": POOL_NS,
                     "labels": {LABEL_POOL: "joulie-agent-pool"},
                     "annotations": {ANNOTATION_CLAIMS: encode_claims(claims)}},
        "spec": {"holderIdentity": pod, "leaseDurationSeconds": 15,
                 "renewTime": micro_ago(renewed_ago)},
    }


def cpu_status(result: str, backend: str, message: str, updated_ago: float,
               observed: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"backend": backend, "result": result, "message": message,
                              "updatedAt": ago(updated_ago)}
    if observed is not None:
        status["observed"] = observed
    return status


def seed(api: Any, leases: bool = True) -> None:
    """Five managed nodes, one unmanaged; two pool Leases (one expired) unless not
    ``leases``."""
    try:
        api.create("namespaces", {"metadata": {"name": POOL_NS}})
    except (ApiError, KeyError):
        pass  # exists already (the shared real server), or the emulator needs none
    for name in ("w-0", "w-1", "w-2", "w-3", "w-4"):
        api.create("nodes", {"metadata": {"name": name, "labels": {
            **MANAGED, "group": "good" if name in ("w-0", "w-1") else "other"}}})
    api.create("nodes", {"metadata": {"name": "u-0"}})
    for name, cap in (("w-0", 120), ("w-2", 200), ("w-3", 150), ("w-4", 90)):
        api.create("nodepowerprofiles", power_profile(name, cap, "eco"))
    for name in ("w-0", "w-2", "w-3"):
        api.create("telemetryprofiles", telemetry_profile(name, None))
    statuses = {
        "w-0": cpu_status("applied", "rapl", "RAPL PL1 120 W per package on 2 package zone(s)", 42,
                          {"packagePowerWatts": 118.4}),
        "w-2": cpu_status("applied", "dvfs", "DVFS throttle 30% for cap 200 W", 7200,
                          {"observedPowerWatts": 196.0}),
        "w-3": cpu_status("error", "none", "telemetry: http://sim/telemetry/w-3: timed out", 15),
    }
    for name, cpu in statuses.items():
        api.patch("telemetryprofiles", name, {"status": {"control": {"cpu": cpu}}},
                  subresource="status")
    api.create("nodetwins", {
        "metadata": {"name": "w-1"},
        "spec": {"nodeName": "w-1", "profile": "eco",
                 "cpu": {"packagePowerCapPctOfMax": 60},
                 "gpu": {"powerCap": {"scope": "perGpu", "capWattsPerGpu": 250}}},
    })
    api.patch("nodetwins", "w-1", {"status": {
        "controlStatus": {
            "cpu": cpu_status("applied", "rapl", "60% of max 330 W = 198.0 W: RAPL PL1", 300),
            "gpu": cpu_status("applied", "http", "GPU cap 250 W", 300)},
        # Joulie's operator's: the whole node's power, as its Prometheus query measured it.
        "powerMeasurement": {"source": "prometheus", "measuredNodePowerW": 412.3,
                             "nodeTdpW": 700}}}, subresource="status")
    if not leases:
        return
    api.create("leases", lease("joulie-agent-pool-0", 3, {"w-0", "w-1", "w-3"}),
               namespace=POOL_NS)
    api.create("leases", lease("joulie-agent-pool-1", 60, {"w-2"}), namespace=POOL_NS)


@pytest.fixture
def seeded(backend: Backend) -> Iterator[Backend]:
    seed(backend.direct)
    try:
        yield backend
    finally:
        for name in ("joulie-agent-pool-0", "joulie-agent-pool-1"):
            backend.direct.delete("leases", name, POOL_NS)


def status(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentpool", "status", "--kubeconfig", str(kubeconfig),
         "--now", NOW.strftime("%Y-%m-%dT%H:%M:%SZ"), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )


def golden(name: str) -> str:
    return (GOLDEN / name).read_text()


def test_an_elastic_pool_shows_each_nodes_pod_and_which_have_none(seeded: Backend) -> None:
    done = status(seeded.kubeconfig)
    assert done.returncode == 1, done.stderr
    assert done.stdout == golden("elastic.txt")
    assert done.stderr == golden("elastic.stderr")


def test_a_static_pool_shows_shards_and_stale_statuses(seeded: Backend) -> None:
    # Leases of another namespace only (none there): the static pool's view, with shards.
    done = status(seeded.kubeconfig, "--shards", "2", "-n", "default", "-o", "wide")
    assert done.returncode == 1, done.stderr
    assert done.stdout == golden("static-wide.txt")
    assert done.stderr == golden("static-wide.stderr")


def chart_statefulset(**pool: Any) -> dict[str, Any]:
    """The pool StatefulSet as the chart renders it (Helm's own engine), ``pool`` merged
    into ``agent.pool``."""
    with load_helm().Chart.load(CHART_DIR) as chart:
        objects = parse_manifests(chart.render(
            {"agent": {"mode": "pool", "pool": pool}}, name="joulie", namespace=POOL_NS))
    return one(objects, "StatefulSet")


@pytest.fixture
def static_pool(backend: Backend) -> Iterator[Backend]:
    """The seeded cluster without Leases, and the chart's StatefulSet of 2 replicas."""
    seed(backend.direct, leases=False)
    sts = chart_statefulset(replicas=2)
    backend.direct.create("statefulsets", sts, namespace=POOL_NS)
    try:
        yield backend
    finally:
        backend.direct.delete("statefulsets", sts["metadata"]["name"], POOL_NS)


def test_a_static_pool_shows_shards_read_from_its_statefulset(static_pool: Backend) -> None:
    # The same table as with --shards 2, and where the count was found.
    done = status(static_pool.kubeconfig, "-o", "wide")
    assert done.returncode == 1, done.stderr
    assert done.stdout == golden("static-wide.txt")
    assert done.stderr == golden("static-statefulset.stderr")
    # --shards still wins, and a namespace without the pool finds none.
    done = status(static_pool.kubeconfig, "--shards", "3", "-o", "json")
    assert json.loads(done.stdout)["notes"] == ["shards: 3 (--shards)"]
    # A namespace of its own: other tests on the shared server leave pools in "default".
    done = status(static_pool.kubeconfig, "-n", "no-pool-here", "-o", "json")
    document = json.loads(done.stdout)
    assert {row["owner"] for row in document["nodes"]} == {None}
    assert document["notes"] == [
        "shards: not found (no StatefulSet in namespace no-pool-here runs the agent with "
        "AGENT_MODE=pool): --shards N names each node's shard"]


def test_a_user_who_may_not_list_statefulsets_gets_the_table_and_why_no_shards(
    envtest_server: EnvtestServer, tmp_path: Path,
) -> None:
    """The plugin runs with the user's credentials: a role that reads what the table needs
    but not StatefulSets costs only the shard counts."""
    server = envtest_server
    admin = server.api()
    admin.wipe(KINDS)
    seed(admin, leases=False)
    sts = chart_statefulset(replicas=2)
    admin.create("statefulsets", sts, namespace=POOL_NS)
    name = "agentpool-status-viewer"
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
        {"apiGroups": ["joulie.io"], "resources": ["*"], "verbs": ["get", "list"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]},
    ]
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": name, "namespace": POOL_NS}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": name}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": POOL_NS}]},
    ]
    admin.apply(objects)
    try:
        kubeconfig = server.service_account_kubeconfig(tmp_path / "viewer", POOL_NS, name)
        done = status(kubeconfig, "-o", "wide")
        assert done.returncode == 1, done.stderr
        first, *problems = done.stderr.splitlines()
        assert first.startswith("shards: unknown (StatefulSets not listed: list statefulsets: "
                                "HTTP 403 ")
        assert first.endswith("--shards N names each node's shard")
        assert problems == golden("static-wide.stderr").splitlines()[1:]
        # No shard known; w-2's status is stale: nobody owns it.
        owners = [line.split()[1] for line in done.stdout.splitlines()[1:]]
        assert owners == ["-", "-", "none", "-", "-"]
    finally:
        for obj in reversed(objects):
            kind = f"{obj['kind']}.{obj['apiVersion']}"
            admin.delete(kind, obj["metadata"]["name"], obj["metadata"].get("namespace"))
        admin.delete("statefulsets", sts["metadata"]["name"], POOL_NS)
        admin.wipe(KINDS)


def test_healthy_nodes_exit_0_and_json_says_the_same(seeded: Backend) -> None:
    done = status(seeded.kubeconfig, "-l", "group=good", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    document = json.loads(done.stdout)
    assert document == json.loads(golden("healthy.json"))


def test_kubectl_runs_it_as_the_agentpool_plugin(seeded: Backend) -> None:
    """``kubectl agentpool status``: kubectl finds ``kubectl-agentpool`` on PATH and runs it."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl on PATH")
    scripts = Path(sys.executable).parent
    assert (scripts / "kubectl-agentpool").is_file(), "the package's console scripts are missing"
    env = {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}",
           "KUBECONFIG": str(seeded.kubeconfig)}
    done = subprocess.run(
        [kubectl, "agentpool", "status", "--now", NOW.strftime("%Y-%m-%dT%H:%M:%SZ")],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout == golden("elastic.txt")


def test_an_unreachable_cluster_exits_3(tmp_path: Path, backend: Backend) -> None:
    config = backend.kubeconfig.read_text()
    dead = tmp_path / "dead-kubeconfig"
    # The same credentials, a port nothing listens on.
    server = next(line for line in config.splitlines() if "server:" in line or '"server"' in line)
    url = server.split("server", 1)[1].strip(' :",')
    dead.write_text(config.replace(url, "https://127.0.0.1:9"))
    done = status(dead)
    assert done.returncode == 3
    assert done.stderr.startswith("agentpool status: cannot read the cluster: ")


@pytest.fixture
def cluster(sim_cluster: SimCluster) -> SimCluster:
    return sim_cluster


def test_it_agrees_with_a_running_static_pool(cluster: SimCluster) -> None:
    nodes = [f"kwok-node-{i}" for i in range(4)]
    for node in nodes:
        cluster.add_node(node)
    # The chart's StatefulSet is there (no controller makes its pods here): the agents run
    # as its pods would, with its POOL_SHARDS and their ordinals.
    sts = chart_statefulset(replicas=2)
    with contextlib.suppress(ApiError, KeyError):
        cluster.api.create("namespaces", {"metadata": {"name": POOL_NS}})
    cluster.api.create("statefulsets", sts, namespace=POOL_NS)
    try:
        env = {v["name"]: v["value"] for v in sts["spec"]["template"]["spec"]["containers"][0][
            "env"] if v["name"] in ("POOL_SHARDS", "POOL_NODE_SELECTOR")}
        agents = [cluster.start_agent({**env, "POD_NAME": f"joulie-agent-pool-{i}"})
                  for i in range(2)]
        for agent in agents:
            agent.wait_ready(60)
        wait_until(lambda: all(cluster.status(n).get("result") == "applied" for n in nodes), 60)
        wait_until(lambda: sum(len(worker_pids(a)) for a in agents) == len(nodes), 15)
        done = subprocess.run(
            [sys.executable, "-m", "agentpool", "status", "--kubeconfig",
             str(cluster.kubeconfig), "-o", "json"],
            capture_output=True, text=True, timeout=60, check=False)
    finally:
        cluster.api.delete("statefulsets", sts["metadata"]["name"], POOL_NS)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    rows = document["nodes"]
    # Each node's shard, as the pods that write its status own it: fnv32a(node) % 2.
    owners = {node: f"shard {i}" for i, agent in enumerate(agents) for node in worker_pids(agent)}
    assert [(r["node"], r["owner"], r["ownerLive"], r["result"], r["backend"], r["cpuCap"])
            for r in rows] == [(n, owners[n], True, "applied", "rapl", "120 W") for n in nodes]
    assert document["notes"] == [
        "shards: 2 (StatefulSet joulie-system/joulie-agent-pool, POOL_SHARDS)"]
    for agent in agents:
        assert agent.terminate() == 0
    # Stopped: nothing claims a cap is in force, and nobody is there to keep the status.
    later = (datetime.now(UTC) + timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    done = subprocess.run(
        [sys.executable, "-m", "agentpool", "status", "--kubeconfig", str(cluster.kubeconfig),
         "--stale", "1s", "--now", later, "-o", "json"],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    rows = json.loads(done.stdout)["nodes"]
    assert [(r["result"], r["ownerLive"]) for r in rows] == [("none", False)] * len(nodes)
    assert all(r["message"] == "agent stopped; host limits restored" for r in rows)
