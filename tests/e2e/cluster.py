"""The cluster under end-to-end test: what the environment names, and how the tests act on it.

Any cluster will do (the shared single-node 1.20 of ``.ci/run``, a kind cluster, a
lab): the suite reaches it only through ``AGENTPOOL_E2E_KUBECONFIG``, installs the
chart with the Helm SDK, and runs the image ``AGENTPOOL_E2E_IMAGE``, which the
cluster's nodes must be able to start (imported, or pushed to a registry they pull
from). It needs cluster-admin there: it creates Nodes (fake ones, labelled for
management and tainted so nothing is scheduled on them), the chart's CRDs, a
namespace, and one privileged helper pod per real node it uses, which stands in for
a shell on that node: it makes the sysfs-shaped tree the DaemonSet mounts, reads it
back, and freezes a container's PID 1 (``hostPID``). So the suite never needs to run
on a node itself, and works the same where the nodes are containers (kind).

Everything it makes is removed when it ends; a cluster that already has Joulie's
CRDs keeps them (and its objects), one without them gets none left behind.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "charts" / "joulie"
RELEASE = "joulie"
NAMESPACE = "agentpool-e2e"
AGENT_LABELS = "app.kubernetes.io/component=agent,app.kubernetes.io/instance=joulie"
FAKE_LABEL = "agentpool.e2e/fake"
HELPER_LABEL = "agentpool.e2e/helper"
CRDS = (
    "nodepowerprofiles.joulie.io",
    "telemetryprofiles.joulie.io",
    "nodetwins.joulie.io",
    "nodehardwares.joulie.io",
)
GROUP, VERSION = "joulie.io", "v1alpha1"

HOW_TO_RUN = (
    "end-to-end tests need a cluster: set AGENTPOOL_E2E_KUBECONFIG (cluster-admin) and "
    "AGENTPOOL_E2E_IMAGE (an image the nodes can start, built from this Dockerfile); "
    ".ci/run does both with ../shared/cluster (docs/development.md: end-to-end tests "
    "on a real cluster)"
)


def wait_until[T](what: str, predicate: Callable[[], T | None], timeout: float,
               interval: float = 0.5) -> T:
    """Poll ``predicate`` until it returns something truthy; that value, or AssertionError."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except ApiException as exc:  # a pod between incarnations, an object not there yet
            last_error = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}"
                                 + (f" (last error: {last_error})" if last_error else ""))
        time.sleep(interval)


def split_image(reference: str) -> tuple[str, str]:
    """``repo[:tag]`` -> (repository, tag); a port in the registry host is not a tag."""
    name, sep, tag = reference.rpartition(":")
    if not sep or "/" in tag:
        return reference, "latest"
    return name, tag


@dataclass
class Settings:
    """What the environment says about the cluster under test."""

    kubeconfig: Path
    image: str
    sim_image: str
    pull_policy: str
    values: dict[str, Any]
    """Merged into every install (AGENTPOOL_E2E_VALUES, JSON): what a cluster needs
    beyond the chart's defaults, such as imagePullSecrets."""
    host_dir: str
    """Where on a node the helper makes its trees (AGENTPOOL_E2E_HOST_DIR)."""

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Settings | None:
        kubeconfig = environ.get("AGENTPOOL_E2E_KUBECONFIG", "").strip()
        image = environ.get("AGENTPOOL_E2E_IMAGE", "").strip()
        if not kubeconfig or not image:
            return None
        return cls(
            kubeconfig=Path(kubeconfig),
            image=image,
            sim_image=environ.get("AGENTPOOL_E2E_SIM_IMAGE", "").strip() or image,
            pull_policy=environ.get("AGENTPOOL_E2E_PULL_POLICY", "").strip() or "IfNotPresent",
            values=json.loads(environ.get("AGENTPOOL_E2E_VALUES", "").strip() or "{}"),
            host_dir=environ.get("AGENTPOOL_E2E_HOST_DIR", "").strip() or "/tmp/agentpool-e2e",
        )


def merged(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in, maps recursively (as Helm merges values)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


@dataclass
class Cluster:
    """Clients of the cluster under test and the few things every test does with it."""

    settings: Settings
    api: client.ApiClient = field(init=False)
    core: client.CoreV1Api = field(init=False)
    apps: client.AppsV1Api = field(init=False)
    custom: client.CustomObjectsApi = field(init=False)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    def __post_init__(self) -> None:
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(self.settings.kubeconfig),
                                client_configuration=cfg)
        self.api = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def close(self) -> None:
        self.api.close()

    # -- the chart, by Helm ------------------------------------------------------------

    def values(self, **agent: Any) -> dict[str, Any]:
        """The chart's defaults plus the image, ``agent`` keys and the environment's values."""
        repository, tag = split_image(self.settings.image)
        values = {
            "image": {"repository": repository, "tag": tag,
                      "pullPolicy": self.settings.pull_policy},
            "agent": agent,
        }
        return merged(values, self.settings.values)

    def helm(self) -> Any:
        import helm_python

        return helm_python.Config(kubeconfig_path=str(self.settings.kubeconfig),
                                  namespace=NAMESPACE)

    def install(self, values: dict[str, Any], chart: Path = CHART_DIR) -> dict[str, Any]:
        """The release, as Helm describes it (``info.notes`` is the rendered NOTES.txt);
        ``chart``: a chart's directory or packaged archive."""
        with self.helm() as helm:
            release: dict[str, Any] = helm.install(str(chart), RELEASE, values,
                                                   namespace=NAMESPACE, wait="watcher",
                                                   timeout=300)
        return release

    def upgrade(self, values: dict[str, Any], chart: Path = CHART_DIR) -> None:
        with self.helm() as helm:
            helm.upgrade(str(chart), RELEASE, values, namespace=NAMESPACE,
                         wait="watcher", timeout=300)

    def revisions(self) -> list[tuple[int, str, str]]:
        """(revision, chart version, status) of each revision of the release, oldest first."""
        with self.helm() as helm:
            return [(r["revision"], r["chart_version"], r["status"])
                    for r in helm.history(RELEASE)]

    def uninstall(self) -> None:
        """Remove the release and wait until its pods are gone (each restores on SIGTERM)."""
        with self.helm() as helm:
            helm.uninstall(RELEASE, ignore_not_found=True, wait="watcher", timeout=300)
        wait_until("the agent pods to be gone", lambda: not self.agent_pods(), 120)

    # -- pods -------------------------------------------------------------------------

    def agent_pods(self) -> list[client.V1Pod]:
        pods = self.core.list_namespaced_pod(NAMESPACE, label_selector=AGENT_LABELS).items
        return sorted(pods, key=lambda p: p.metadata.name)

    def pods_selected(self, selector: str) -> list[str]:
        """Names of the pods a label selector finds (``kubectl get pods -l``), sorted."""
        pods = self.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
        return sorted(p.metadata.name for p in pods)

    def ready_agent_pods(self, count: int) -> list[client.V1Pod] | None:
        pods = [p for p in self.agent_pods() if p.metadata.deletion_timestamp is None]
        if len(pods) == count and all(is_ready(p) for p in pods):
            return pods
        return None

    def unhealthy_events(
        self, pods: Iterable[client.V1Pod], before: datetime.datetime | None = None
    ) -> list[str]:
        """Every failed probe the kubelet reported for these pods (these incarnations: a
        StatefulSet's pods come back under the same name); with ``before``, only those that
        first happened before it (the kubelet stamps events to the second, on this clock)."""
        uids = {p.metadata.uid for p in pods}
        events = self.core.list_namespaced_event(NAMESPACE).items
        return [
            f"{e.involved_object.name}: {e.message}"
            for e in events
            if e.reason == "Unhealthy" and e.involved_object.uid in uids
            and (before is None or e.first_timestamp is None or e.first_timestamp < before)
        ]

    def logs(self, pod: str, previous: bool = False) -> str:
        text: str = self.core.read_namespaced_pod_log(pod, NAMESPACE, previous=previous)
        return text

    def follow_logs(self, pod: str) -> Callable[[], str]:
        """Start following a pod's log (``kubectl logs -f``): a function that waits for its
        container to end (at most two minutes) and returns what it wrote from now on."""
        response = self.core.read_namespaced_pod_log(
            pod, NAMESPACE, follow=True, since_seconds=1, _preload_content=False)
        chunks: list[bytes] = []

        def read() -> None:
            try:
                for chunk in response.stream(4096):
                    chunks.append(chunk)
            except Exception as exc:  # a log stream cut short: say so in what is returned
                chunks.append(f"\n[log stream ended: {exc!r}]".encode())
            finally:
                response.release_conn()

        thread = threading.Thread(target=read, daemon=True)
        thread.start()

        def result() -> str:
            thread.join(120)
            return b"".join(chunks).decode(errors="replace")

        return result

    def exec(self, pod: str, command: list[str], timeout_s: float = 120.0) -> str:
        """Run ``command`` in ``pod``'s only container (``kubectl exec``); its stdout.

        A non-zero exit is an AssertionError carrying stderr. The socket is closed
        here: the client's own preloading call leaves it open.
        """
        # A client of its own: stream() swaps its client's request method for a websocket
        # one while it runs, which would catch other threads' requests on a shared client.
        api = client.ApiClient(self.api.configuration)
        try:
            ws = stream(
                client.CoreV1Api(api).connect_get_namespaced_pod_exec, pod, NAMESPACE,
                command=command, stderr=True, stdin=False, stdout=True, tty=False,
                _preload_content=False,
            )
        finally:
            api.close()
        try:
            out: list[str] = []
            err: list[str] = []
            deadline = time.monotonic() + timeout_s
            while ws.is_open() and time.monotonic() < deadline:
                ws.update(timeout=1)
                if ws.peek_stdout():
                    out.append(ws.read_stdout())
                if ws.peek_stderr():
                    err.append(ws.read_stderr())
            if ws.is_open():
                raise AssertionError(f"{quoted(command)} in {pod}: no end in {timeout_s:g}s")
            out.append(ws.read_stdout() if ws.peek_stdout() else "")
            code = ws.returncode
        finally:
            ws.close()
            if ws.sock is not None:
                ws.sock.shutdown()  # close() skips it once the server has closed first
        if code != 0:
            raise AssertionError(f"{quoted(command)} in {pod} exited {code}: {''.join(err)}")
        return "".join(out)

    def python(self, pod: str, code: str, *args: str) -> Any:
        """Run Python ``code`` in ``pod``; it prints one JSON document, returned parsed."""
        out = self.exec(pod, ["python", "-c", code, *args])
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise AssertionError(f"python in {pod} printed no JSON: {out!r}") from exc

    def watch_pod(self, name: str, timeout_s: int) -> Iterator[tuple[str, client.V1Pod]]:
        """(event type, pod) for one pod, from now on."""
        events = watch.Watch().stream(
            self.core.list_namespaced_pod, NAMESPACE, field_selector=f"metadata.name={name}",
            timeout_seconds=timeout_s,
        )
        for event in events:
            yield event["type"], event["object"]

    # -- services -------------------------------------------------------------------------

    def service_get(self, service: str, port: int, path: str) -> bytes:
        """GET ``path`` from a Service through the API server's proxy."""
        response = self.core.connect_get_namespaced_service_proxy_with_path(
            f"{service}:{port}", NAMESPACE, path.lstrip("/"), _preload_content=False
        )
        try:
            data: bytes = response.data
        finally:
            response.release_conn()
        return data

    def cluster_ip(self, service: str) -> str:
        ip: str = self.core.read_namespaced_service(service, NAMESPACE).spec.cluster_ip
        return ip

    # -- custom resources --------------------------------------------------------------

    def apply_custom(self, plural: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        try:
            current = self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.custom.create_cluster_custom_object(GROUP, VERSION, plural, obj)
            return
        obj = {**obj, "metadata": {**obj["metadata"],
                                   "resourceVersion": current["metadata"]["resourceVersion"]}}
        self.custom.replace_cluster_custom_object(GROUP, VERSION, plural, name, obj)

    def delete_custom(self, plural: str, name: str) -> None:
        try:
            self.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def status_of(self, node: str) -> dict[str, Any]:
        """The agent's report on ``node``: its TelemetryProfile's ``status.control.cpu``."""
        try:
            tp = self.custom.get_cluster_custom_object(GROUP, VERSION, "telemetryprofiles", node)
        except ApiException as exc:
            if exc.status == 404:
                return {}
            raise
        cpu: dict[str, Any] = ((tp.get("status") or {}).get("control") or {}).get("cpu") or {}
        return cpu

    def namespace_gone(self, name: str = NAMESPACE) -> bool:
        try:
            self.core.read_namespace(name)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    def crds_present(self) -> set[str]:
        ext = client.ApiextensionsV1Api(self.api)
        names = {c.metadata.name for c in ext.list_custom_resource_definition().items}
        return names & set(CRDS)

    def delete_crds(self, names: set[str]) -> None:
        ext = client.ApiextensionsV1Api(self.api)
        for name in names:
            try:
                ext.delete_custom_resource_definition(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise

    # -- nodes ----------------------------------------------------------------------------

    def real_node(self) -> str:
        """A Ready node that is not one of ours: where the helper and the DaemonSet run."""
        for node in self.core.list_node().items:
            labels = node.metadata.labels or {}
            ready = any(c.type == "Ready" and c.status == "True"
                        for c in node.status.conditions or [])
            if FAKE_LABEL not in labels and ready and not node.spec.unschedulable:
                name: str = node.metadata.name
                return name
        raise AssertionError("no Ready, schedulable node in the cluster")

    def add_fake_nodes(self, names: list[str]) -> None:
        """Nodes with no kubelet: what pool mode controls over HTTP (the kind recipe's KWOK
        nodes, without KWOK). Tainted so that no pod is ever scheduled there."""
        for name in names:
            body = client.V1Node(
                metadata=client.V1ObjectMeta(name=name, labels={
                    "joulie.io/managed": "true",
                    FAKE_LABEL: "true",
                    "kubernetes.io/hostname": name,
                    "feature.node.kubernetes.io/cpu-vendor": "GenuineIntel",
                }),
                spec=client.V1NodeSpec(taints=[
                    client.V1Taint(key=FAKE_LABEL, value="true", effect="NoSchedule"),
                ]),
            )
            self.core.create_node(body)

    def remove_pool(self, nodes: Iterable[str]) -> None:
        """What a pool test leaves: the release (its pods gone), the nodes' profiles and
        every fake node."""
        self.uninstall()
        for node in nodes:
            self.delete_custom("telemetryprofiles", node)
            self.delete_custom("nodepowerprofiles", node)
        self.delete_fake_nodes()

    def delete_fake_nodes(self) -> None:
        for node in self.core.list_node(label_selector=f"{FAKE_LABEL}=true").items:
            try:
                self.core.delete_node(node.metadata.name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def is_ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def restarts(pod: client.V1Pod) -> int:
    return sum(s.restart_count for s in pod.status.container_statuses or [])


def quoted(command: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in command)
