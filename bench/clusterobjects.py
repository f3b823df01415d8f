"""The objects of a large cluster, as real ones are, and the writes other nodes cause.

A Node as a kubelet and Node Feature Discovery leave it (about 14 KB of JSON:
40 container images, 5 conditions, about 25 labels, a quarter of the nodes with
8 NVIDIA GPUs), its NodeTwin as Joulie's operator writes it (named after the
node, spec and operator status, about 2 KB) and its NodeHardware as an agent
publishes it (about 2 KB). :class:`Writers` creates them fast, over kept-alive
HTTPS connections in a few threads, and :class:`Churn` rewrites other nodes'
statuses at a steady rate: what a pod of a large cluster receives when it is
not told only about its own nodes.

Stand-in: the values are made up (deterministic per node), the shapes are those
of real clusters' objects; no kubelet or NFD runs.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import queue
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from agentpool.sim.objects import MANAGED, node_twin, operator_status, twin_name

JOULIE = "/apis/joulie.io/v1alpha1"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def is_gpu_node(index: int) -> bool:
    """A quarter of the nodes carry GPUs."""
    return index % 4 == 3


def node_object(name: str, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Node's create body (metadata) and its status, as a real cluster's (about 14 KB)."""
    gpu = is_gpu_node(index)
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "gpu-8x" if gpu else "cpu-64",
        "topology.kubernetes.io/region": "eu-west",
        "topology.kubernetes.io/zone": f"eu-west-{index % 3}",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "AuthenticAMD" if index % 2 else "Intel",
        "feature.node.kubernetes.io/cpu-model.family": "25" if index % 2 else "6",
        "feature.node.kubernetes.io/cpu-model.id": "17" if index % 2 else "143",
        "feature.node.kubernetes.io/cpu-cpuid.AVX2": "true",
        "feature.node.kubernetes.io/cpu-cpuid.AVX512F": "true",
        "feature.node.kubernetes.io/cpu-hardware_multithreading": "true",
        "feature.node.kubernetes.io/cpu-rdt.RDTCMT": "true",
        "feature.node.kubernetes.io/kernel-version.full": "6.1.0-13-amd64",
        "feature.node.kubernetes.io/kernel-version.major": "6",
        "feature.node.kubernetes.io/memory-numa": "true",
        "feature.node.kubernetes.io/pci-1af4.present": "true",
        "feature.node.kubernetes.io/storage-nonrotationaldisk": "true",
        "feature.node.kubernetes.io/system-os_release.ID": "debian",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "12",
        MANAGED: "true",
    }
    if gpu:
        labels["feature.node.kubernetes.io/pci-10de.present"] = "true"
        labels["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
        labels["nvidia.com/gpu.count"] = "8"
    images = []
    for i in range(40):
        repo = f"registry.example.com/team-{i % 7}/service-{i}"
        images.append({
            "names": [f"{repo}@sha256:{_digest(f'{name}/{i}')}", f"{repo}:v1.{i}.{index % 10}"],
            "sizeBytes": 10_000_000 + 1_234_567 * i,
        })
    stamp = "2026-12-01T00:00:00Z"
    conditions = [
        {"type": kind, "status": "False", "reason": f"KubeletHas{reason}",
         "message": f"kubelet has {words}", "lastHeartbeatTime": stamp,
         "lastTransitionTime": stamp}
        for kind, reason, words in (
            ("MemoryPressure", "SufficientMemory", "sufficient memory available"),
            ("DiskPressure", "NoDiskPressure", "no disk pressure"),
            ("PIDPressure", "SufficientPID", "sufficient PID available"),
            ("NetworkUnavailable", "RouteCreated", "routes created"),
        )
    ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady",
          "message": "kubelet is posting ready status", "lastHeartbeatTime": stamp,
          "lastTransitionTime": stamp}]
    capacity = {"cpu": "64", "ephemeral-storage": "960000000Ki", "hugepages-1Gi": "0",
                "hugepages-2Mi": "0", "memory": "263855804Ki", "pods": "110"}
    allocatable = {"cpu": "63", "ephemeral-storage": "884763297082", "hugepages-1Gi": "0",
                   "hugepages-2Mi": "0", "memory": "261758652Ki", "pods": "110"}
    if gpu:
        capacity["nvidia.com/gpu"] = allocatable["nvidia.com/gpu"] = "8"
    status = {
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": f"10.{index // 65536 % 256}."
                                                        f"{index // 256 % 256}.{index % 256}"},
                      {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": _digest(name)[:32], "systemUUID": _digest(name + "u")[:36],
            "bootID": _digest(name + "b")[:36], "kernelVersion": "6.1.0-13-amd64",
            "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion":
            "containerd://1.6.20", "kubeletVersion": "v1.20.2", "kubeProxyVersion": "v1.20.2",
            "operatingSystem": "linux", "architecture": "amd64",
        },
        "images": images,
    }
    meta = {"name": name, "labels": labels, "annotations": {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "nfd.node.kubernetes.io/feature-labels": ",".join(
            k.split("/", 1)[1] for k in labels if k.startswith("feature.node")),
    }}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}, status


def twin_objects(name: str, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A NodeTwin as Joulie's operator writes it: its create body and its status."""
    twin = node_twin(name, cap=None, pct=60.0 + index % 30, profile="eco")
    twin["spec"]["gpu"] = {"powerCap": {"scope": "perGpu", "capPctOfMax": 70}}
    status = operator_status(name)
    status["controlStatus"]["cpu"] = {
        "backend": "http", "result": "applied",
        "message": f"cap {150 + index % 50} W applied (60% of max)",
        "updatedAt": "2026-12-01T00:00:00Z",
    }
    return twin, status


def hardware_objects(name: str, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A NodeHardware as an agent publishes it: its create body and its status."""
    gpu = is_gpu_node(index)
    body = {"apiVersion": "joulie.io/v1alpha1", "kind": "NodeHardware",
            "metadata": {"name": twin_name(name)}, "spec": {"nodeName": name}}
    status: dict[str, Any] = {
        "cpu": {"vendor": "AuthenticAMD", "rawModel": "AMD EPYC 9654 96-Core Processor",
                "model": "AMD EPYC 9654", "sockets": 2, "coresPerSocket": 96,
                "totalCores": 192, "driverFamily": "amd-rapl",
                "capRange": {"type": "package", "minWattsPerSocket": 200,
                             "maxWattsPerSocket": 400},
                "landmarks": {"minFreqMHz": 1500, "nominalFreqMHz": 2400, "maxBoostMHz": 3700},
                "controlAvailable": True, "telemetryAvailable": True,
                "warnings": ["package maximum from the RAPL constraint, not the data sheet"]},
        "gpu": {"present": False, "count": 0, "controlAvailable": False,
                "telemetryAvailable": False, "warnings": []},
        "memory": {"totalBytes": 270188343296},
        "quality": {"overall": "exact", "warnings": []},
        "lastUpdated": "2026-12-01T00:00:00Z",
    }
    if gpu:
        status["gpu"] = {
            "present": True, "vendor": "nvidia", "count": 8, "rawModel": "NVIDIA-H100-80GB-HBM3",
            "model": "H100-SXM", "capRangePerGpu": {"minWatts": 200, "maxWatts": 700,
                                                    "defaultWatts": 700},
            "controlAvailable": True, "telemetryAvailable": True, "warnings": []}
    return body, status


class Connections:
    """Kept-alive HTTPS connections to one API server, one per thread."""

    def __init__(self, url: str, token: str, context: ssl.SSLContext) -> None:
        parts = urlsplit(url)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 443
        self._token = token
        self._context = context
        self._local = threading.local()

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> int:
        """One request; its HTTP status (the answer is read and dropped)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = http.client.HTTPSConnection(
                    self._host, self._port, context=self._context, timeout=60)
            try:
                conn.request(method, path, data, headers)
                answer = conn.getresponse()
                answer.read()
                return answer.status
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


def _ok(status: int, what: str) -> None:
    if status not in (200, 201, 409):  # 409: there already (a rerun over a seeded cluster)
        raise RuntimeError(f"{what}: HTTP {status}")


def seed(conns: Connections, names: Sequence[str], threads: int = 6) -> None:
    """Nodes, NodeTwins and NodeHardwares of ``names``, each with its status."""

    def one(item: tuple[int, str]) -> None:
        index, name = item
        node, node_status = node_object(name, index)
        _ok(conns.request("POST", "/api/v1/nodes", node), f"create node {name}")
        _ok(conns.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": node_status},
                          "application/merge-patch+json"), f"status of node {name}")
        for plural, (body, status) in (("nodetwins", twin_objects(name, index)),
                                       ("nodehardwares", hardware_objects(name, index))):
            _ok(conns.request("POST", f"{JOULIE}/{plural}", body), f"create {plural} {name}")
            path = f"{JOULIE}/{plural}/{body['metadata']['name']}/status"
            _ok(conns.request("PATCH", path, {"status": status}, "application/merge-patch+json"),
                f"status of {plural} {name}")

    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(one, enumerate(names)):
            pass


def churn_rates(nodes: int, cap: float = 100.0) -> tuple[float, float]:
    """Writes per second to other nodes' NodeTwin statuses (the operator, once a minute each)
    and NodeHardware statuses (agents' heartbeats, once in 5 minutes each), both scaled down
    together to ``cap`` in all."""
    twins, hardware = nodes / 60.0, nodes / 300.0
    scale = min(1.0, cap / (twins + hardware))
    return twins * scale, hardware * scale


class Churn:
    """Rewrites other nodes' statuses at a steady rate from a few threads until stopped."""

    def __init__(self, conns: Connections, others: Sequence[str], rate: float,
                 hardware_share: float, threads: int = 4) -> None:
        self._conns = conns
        self._others = others
        self._rate = rate
        self._hardware_share = hardware_share
        self._threads = threads
        self._stop = threading.Event()
        self._work: queue.Queue[int | None] = queue.Queue(maxsize=threads * 4)
        self.writes = 0
        self.failures = 0
        self._lock = threading.Lock()
        self._pool: list[threading.Thread] = []

    def _write(self, serial: int) -> None:
        name = self._others[serial % len(self._others)]
        if (serial * 7919) % 1000 < self._hardware_share * 1000:
            path = f"{JOULIE}/nodehardwares/{twin_name(name)}/status"
            stamp = f"2026-12-06T00:00:{serial % 60:02d}Z"
            body: dict[str, Any] = {"status": {"lastUpdated": stamp}}
        else:
            path = f"{JOULIE}/nodetwins/{twin_name(name)}/status"
            body = {"status": {"predictedPowerHeadroomScore": 40.0 + serial % 997 / 10.0}}
        status = self._conns.request("PATCH", path, body, "application/merge-patch+json")
        with self._lock:
            self.writes += 1
            self.failures += status != 200

    def _worker(self) -> None:
        while (serial := self._work.get()) is not None:
            self._write(serial)

    def _pace(self) -> None:
        start, serial = time.monotonic(), 0
        while not self._stop.is_set():
            due = start + serial / self._rate
            delay = due - time.monotonic()
            if delay > 0 and self._stop.wait(delay):
                break
            self._work.put(serial)
            serial += 1
        for _ in self._pool[1:]:
            self._work.put(None)

    def __enter__(self) -> Churn:
        self._pool = [threading.Thread(target=self._pace, daemon=True)]
        self._pool += [threading.Thread(target=self._worker, daemon=True)
                       for _ in range(self._threads)]
        for thread in self._pool:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._pool:
            thread.join(30)


def others(names: Iterable[str], owned: Callable[[str], bool]) -> list[str]:
    """Every node the pod under test does not control."""
    return [n for n in names if not owned(n)]
