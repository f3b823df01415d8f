"""The two workloads the suite runs beside the agent: the power simulator and a node helper.

The simulator is the repository's own (``python -m agentpool.sim.power.server``), run as
docs/deploy.md runs it: a Deployment and a Service, from the image built with
``EXTRAS=[sim]``. It stands in for the hardware of the fake nodes (their telemetry
and control endpoints); its request record (``GET /requests``, through the API
server's service proxy) is what the pool tests judge by: every request names the
pod that sent it in its User-Agent.

The helper is a privileged pod on one real node, in the host's PID and network
namespaces with a host directory mounted: a stand-in for a shell on that node
(sysfs-shaped trees, freezing a container, a free host port).
"""

from __future__ import annotations

import json
import posixpath
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agentpool.sim.power.model import RecordedRequest, RequestKind

from . import timing
from .cluster import HELPER_LABEL, NAMESPACE, Cluster, is_ready, split_image, wait_until

SIM_NAME = "powersim"
SIM_PORT = 18080


class Simulator:
    """The power simulator's Deployment and Service, and its request record."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def start(self) -> Simulator:
        labels = {"app": SIM_NAME}
        repository, tag = split_image(self.cluster.settings.sim_image)
        container = client.V1Container(
            name=SIM_NAME,
            image=f"{repository}:{tag}",
            image_pull_policy=self.cluster.settings.pull_policy,
            command=["python", "-m", "agentpool.sim.power.server", "--host", "0.0.0.0",
                     "--port", str(SIM_PORT)],
            ports=[client.V1ContainerPort(container_port=SIM_PORT, name="http")],
            readiness_probe=client.V1Probe(
                http_get=client.V1HTTPGetAction(path="/healthz", port=SIM_PORT),
                period_seconds=1,
            ),
        )
        deployment = client.V1Deployment(
            metadata=client.V1ObjectMeta(name=SIM_NAME),
            spec=client.V1DeploymentSpec(
                replicas=1,
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(containers=[container],
                                          automount_service_account_token=False,
                                          termination_grace_period_seconds=1),
                ),
            ),
        )
        service = client.V1Service(
            metadata=client.V1ObjectMeta(name=SIM_NAME),
            spec=client.V1ServiceSpec(
                selector=labels,
                ports=[client.V1ServicePort(port=SIM_PORT, target_port=SIM_PORT, name="http")],
            ),
        )
        self.cluster.apps.create_namespaced_deployment(NAMESPACE, deployment)
        self.cluster.core.create_namespaced_service(NAMESPACE, service)
        wait_until("the power simulator to be ready", self._ready, 180)
        return self

    def _ready(self) -> bool:
        pods = self.cluster.core.list_namespaced_pod(NAMESPACE, label_selector=f"app={SIM_NAME}")
        if not any(is_ready(p) for p in pods.items):
            return False
        endpoints = self.cluster.core.read_namespaced_endpoints(SIM_NAME, NAMESPACE)
        return any(subset.addresses for subset in endpoints.subsets or [])

    @property
    def base_url(self) -> str:
        """What a TelemetryProfile names: the Service's cluster IP (no cluster DNS needed)."""
        return f"http://{self.cluster.cluster_ip(SIM_NAME)}:{SIM_PORT}"

    def requests(self) -> list[RecordedRequest]:
        raw = json.loads(self.cluster.service_get(SIM_NAME, SIM_PORT, "/requests"))
        return [
            RecordedRequest(
                node=r["node"], method=r["method"], kind=RequestKind(r["kind"]), path=r["path"],
                body=r["body"], monotonic=r["monotonic"], wall=r["wall"], fault=None,
                user_agent=r["userAgent"],
            )
            for r in raw
        ]

    def telemetry(self, node: str) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(
            self.cluster.service_get(SIM_NAME, SIM_PORT, f"/telemetry/{node}"))
        return answer

    def now(self) -> float:
        """The simulator's clock (monotonic), read through a request it records."""
        self.telemetry("e2e-clock")
        return max(r.monotonic for r in self.requests() if r.node == "e2e-clock")


# The helper's programs: plain Python run inside the helper pod, printing one JSON line.
_MAKE_TREE = """
import json, sys
from pathlib import Path
from agentpool.sim.sysfs.trees import intel_2socket, read_int
tree = intel_2socket(Path(sys.argv[1]))
print(json.dumps({str(z.pl1.limit_file.relative_to(tree.root)): read_int(z.pl1.limit_file)
                  for z in tree.packages}))
"""
_READ = """
import json, sys
from pathlib import Path
def value(path):
    try:
        return int(path.read_text())
    except ValueError:
        return None
print(json.dumps({p: value(Path(sys.argv[1]) / p) for p in sys.argv[2:]}))
"""
_FREEZE = """
import json, os, signal, sys
container = sys.argv[1]
found = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        cgroup = open(f"/proc/{pid}/cgroup").read()
        status = open(f"/proc/{pid}/status").read()
    except OSError:
        continue
    nspid = next((l.split()[1:] for l in status.splitlines() if l.startswith("NSpid:")), [])
    if container in cgroup and nspid and nspid[-1] == "1":
        found.append(int(pid))
if len(found) == 1:
    os.kill(found[0], signal.SIGSTOP)
print(json.dumps(found))
"""
_WAIT_FOR = """
import json, sys, time
from pathlib import Path
root, want, timeout = Path(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3])
Path(sys.argv[4]).touch()  # the caller waits for this before it acts
started = time.monotonic()
while time.monotonic() - started < timeout:
    try:
        if {p: int((root / p).read_text()) for p in want} == want:
            print(json.dumps(time.monotonic() - started))
            break
    except (OSError, ValueError):
        pass  # being written
    time.sleep(0.05)
else:
    print(json.dumps(None))
"""
_FREE_PORT = """
import json, socket
s = socket.socket(); s.bind(("", 0)); print(json.dumps(s.getsockname()[1]))
"""


@dataclass
class NodeHelper:
    """A privileged pod on ``node``: host PID and network namespaces, ``host_dir`` at /e2e."""

    cluster: Cluster
    node: str

    @property
    def name(self) -> str:
        return f"e2e-helper-{self.cluster.run_id}"

    @property
    def host_root(self) -> str:
        """This run's directory on the node (the helper sees it at :meth:`inside`)."""
        return f"{self.cluster.settings.host_dir}/{self.cluster.run_id}"

    def inside(self, host_path: str) -> str:
        """Where the helper sees a path under the host directory's parent."""
        parent = posixpath.dirname(self.cluster.settings.host_dir.rstrip("/"))
        return f"/host-parent/{posixpath.relpath(host_path, parent)}"

    def start(self) -> NodeHelper:
        # The simulation kit's image: the helper builds the node's sysfs tree with
        # agentpool.sim, which the agent's own image leaves out.
        repository, tag = split_image(self.cluster.settings.sim_image)
        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(name=self.name, labels={HELPER_LABEL: "true"}),
            spec=client.V1PodSpec(
                node_name=self.node,
                automount_service_account_token=False,  # no API access, no token to wait for
                host_pid=True,
                host_network=True,
                termination_grace_period_seconds=0,
                tolerations=[client.V1Toleration(operator="Exists")],
                containers=[client.V1Container(
                    name="helper",
                    image=f"{repository}:{tag}",
                    image_pull_policy=self.cluster.settings.pull_policy,
                    command=["sleep", "infinity"],
                    security_context=client.V1SecurityContext(
                        privileged=True, run_as_user=0, run_as_group=0, run_as_non_root=False),
                    volume_mounts=[client.V1VolumeMount(name="host", mount_path="/host-parent")],
                )],
                # The parent, so that the run's directory can be removed, and the host
                # directory with it when no other run uses it.
                volumes=[client.V1Volume(name="host", host_path=client.V1HostPathVolumeSource(
                    path=posixpath.dirname(self.cluster.settings.host_dir.rstrip("/")),
                    type="Directory"))],
            ),
        )
        self.cluster.core.create_namespaced_pod(NAMESPACE, pod)
        wait_until("the node helper to run", self._running, 120)
        return self

    def _running(self) -> bool:
        pod = self.cluster.core.read_namespaced_pod(self.name, NAMESPACE)
        return bool(pod.status.phase == "Running")

    def stop(self) -> None:
        base = self.inside(self.cluster.settings.host_dir)
        try:
            self.cluster.exec(self.name, ["sh", "-c", f"rm -rf {self.inside(self.host_root)}; "
                                          f"rmdir {base} 2>/dev/null || true"])
        except (ApiException, AssertionError):
            pass  # a tree left in the node's tmp; the pod must go anyway
        try:
            self.cluster.core.delete_namespaced_pod(self.name, NAMESPACE, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def python(self, code: str, *args: str) -> Any:
        return self.cluster.python(self.name, code, *args)

    def make_tree(self, subdir: str) -> tuple[str, dict[str, int]]:
        """A two-socket Intel sysfs tree at ``host_root/subdir``: its host path, and each
        package's PL1 file (relative) -> its value."""
        path = f"{self.host_root}/{subdir}"
        values: dict[str, int] = self.python(_MAKE_TREE, self.inside(path))
        return path, values

    def read(self, host_path: str, paths: list[str]) -> dict[str, int | None]:
        """The numbers in files of a tree; None for one that holds none. Unlike sysfs, a
        plain file reads empty while it is rewritten, and stays so when its writer was
        killed in between (a frozen agent's workers die with its PID 1)."""
        values: dict[str, int | None] = self.python(_READ, self.inside(host_path), *paths)
        return values

    def watch_for(
        self, host_path: str, values: dict[str, int], timeout_s: float
    ) -> Callable[[], float | None]:
        """Start watching files of a tree (every 50 ms) until they hold ``values``; returns
        once the watch runs, a function that waits for its answer: seconds, or None."""
        marker = f"{self.inside(self.host_root)}/watching-{uuid.uuid4().hex[:8]}"
        answer: list[float | None] = []
        thread = threading.Thread(target=lambda: answer.append(self.python(
            _WAIT_FOR, self.inside(host_path), json.dumps(values), str(timeout_s), marker)))
        thread.start()
        wait_until("the watch to start", lambda: self.python(
            "import json, os, sys; print(json.dumps(os.path.exists(sys.argv[1])))", marker), 60)

        def result() -> float | None:
            thread.join(timeout_s + 60)
            assert answer, "the watch gave no answer"
            return answer[0]

        return result

    def freeze(self, container_id: str) -> None:
        """SIGSTOP the PID 1 of a container (``containerd://<id>``) of this node."""
        found = self.python(_FREEZE, container_id.split("://")[-1])
        assert len(found) == 1, f"PID 1 of {container_id}: found {found}"

    def free_port(self) -> int:
        """A TCP port free on the node's host network now."""
        port: int = self.python(_FREE_PORT)
        return port


def metrics_of(cluster: Cluster, helper: NodeHelper, url: str, times: int = 1) -> list[str]:
    """``times`` GETs of ``url`` from the helper (a new connection each), the bodies."""
    code = (
        "import json, sys, urllib.request\n"
        "print(json.dumps([urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()"
        " for _ in range(int(sys.argv[2]))]))\n"
    )
    pages: list[str] = helper.python(code, url, str(times))
    return pages


def profiles_for(
    node: str, sim_url: str, cap: float, mode: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The node's NodePowerProfile and its TelemetryProfile routing it to the simulator."""
    npp = {
        "apiVersion": "joulie.io/v1alpha1", "kind": "NodePowerProfile",
        "metadata": {"name": node},
        "spec": {"nodeName": node, "profile": "eco" if cap < 200 else "performance",
                 "cpu": {"packagePowerCapWatts": cap}, "policy": {"name": "e2e"}},
    }
    tp = {
        "apiVersion": "joulie.io/v1alpha1", "kind": "TelemetryProfile",
        "metadata": {"name": node},
        "spec": {
            "target": {"scope": "node", "nodeName": node},
            "sources": {"cpu": {"type": "http", "http": {
                "endpoint": f"{sim_url}/telemetry/{{node}}", "timeoutSeconds": 3}}},
            "controls": {"cpu": {"type": "http", "http": {
                "endpoint": f"{sim_url}/control/{{node}}", "timeoutSeconds": 3, "mode": mode}}},
        },
    }
    return npp, tp


def ready_log(cluster: Cluster, pod: str) -> str:
    """The pod's log once the agent has said it is ready."""
    def said() -> str | None:
        log = cluster.logs(pod)
        return log if timing.agent_seconds(log) is not None else None

    return wait_until(f"{pod} to say it is ready", said, 60)


def all_applied_on(cluster: Cluster, nodes: list[str]) -> bool:
    return all(cluster.status_of(n).get("result") == "applied" for n in nodes)
