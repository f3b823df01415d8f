"""Running and watching an elastic pool from outside: pods, scaling, who controls what.

Owns :class:`PoolDriver` (a StatefulSet in the API server and its pods as real
``agentpool`` processes in lease mode, started and stopped by hand as the
StatefulSet controller and the kubelet would) and the two independent
observations the elastic-pool acceptance tests and
the benchmark judge by (docs/modes.md: elastic pool): the pods' own ``/metrics``
(``agentpool_worker_pid``: a live worker per node) sampled together, and the
power simulator's request log, where every telemetry and control request
carries ``User-Agent: agentpool/<version> (<pod name>, shard <id>)``.

From the request log, pod P *controls* node N from one of its requests for N
to its next one, when the two are at most a window apart (a little over the
reconcile interval, the period of a worker's requests): a clean handoff,
where the old worker's last request precedes the new worker's first, never
has an instant where both hold; two workers running at once interleave
their requests and do.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import itertools
import re
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from agentpool.sim.agentproc import AgentProcess
from agentpool.sim.apiserver.errors import ApiError
from agentpool.sim.cluster import SimCluster
from agentpool.sim.power.model import RecordedRequest

_AGENT = re.compile(r"^agentpool/\S+ \((?P<pod>[^,]+), shard \d+\)$")


def _fnv1a_32(data: bytes) -> int:
    return functools.reduce(lambda h, byte: ((h ^ byte) * 0x01000193) % 2**32, data, 0x811C9DC5)


def _ordinal(pod: str) -> int:
    match = re.search(r"(\d+)$", pod)
    return int(match[1]) if match else 2**31


def expected_owner(node: str, members: list[str], assignment: str) -> str:
    """The member that should run ``node``, worked out from docs/modes.md's definitions
    (fnv32a modulo over the members in ordinal order; rendezvous: the highest 64-bit
    blake2b score of ``member NUL node``, ties to the greater name), not from the
    agent's code, so that the judge cannot share the agent's mistakes."""
    if assignment == "modulo":
        ordered = sorted(members, key=lambda m: (_ordinal(m), m))
        return ordered[_fnv1a_32(node.encode()) % len(ordered)]
    return max(members, key=lambda m: (int.from_bytes(
        hashlib.blake2b(m.encode() + b"\0" + node.encode(), digest_size=8).digest(), "big"), m))


def pod_of(user_agent: str | None) -> str | None:
    """The pod named in an agent's User-Agent, or None for anything else."""
    match = _AGENT.match(user_agent or "")
    return match["pod"] if match else None


def worker_nodes(metrics_text: str) -> set[str]:
    """Nodes with a live worker, from ``agentpool_worker_pid`` in a ``/metrics`` page."""
    nodes: set[str] = set()
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "agentpool_worker_pid" and "node" in sample.labels:
                nodes.add(sample.labels["node"])
    return nodes


def request_overlaps(
    requests: Iterable[RecordedRequest], window_s: float, step_s: float = 0.1,
    since: float = 0.0,
) -> list[tuple[float, str, tuple[str, ...]]]:
    """(instant, node, pods) for every sampled instant where two pods controlled a node.

    Pod P controls node N from one of its requests for N to its next one
    when the two are at most ``window_s`` apart (a worker's requests come
    once per reconcile interval); instants are sampled every ``step_s``.
    """
    times: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for request in requests:
        pod = pod_of(request.user_agent)
        if pod is not None and request.node is not None and request.monotonic >= since:
            times[request.node][pod].append(request.monotonic)
    found: list[tuple[float, str, tuple[str, ...]]] = []
    for node, by_pod in times.items():
        if len(by_pod) < 2:
            continue
        held = {pod: [(a, b) for a, b in itertools.pairwise(ts) if b - a <= window_s]
                for pod, ts in ((p, sorted(ts)) for p, ts in by_pod.items())}
        start = min(min(ts) for ts in by_pod.values())
        end = max(max(ts) for ts in by_pod.values())
        steps = int((end - start) / step_s) + 1
        for i in range(steps):
            t = start + i * step_s
            holders = tuple(sorted(pod for pod, spans in held.items()
                                   if any(a <= t < b for a, b in spans)))
            if len(holders) > 1:
                found.append((t, node, holders))
    return found


def _scrape(scrape: Callable[[], str]) -> str:
    try:
        return scrape()
    except OSError:  # a pod starting or gone
        return ""


@dataclass
class MetricsSampler:
    """Scrapes every pod's ``/metrics`` each ``period_s`` in a thread; keeps each sample."""

    pods: Callable[[], Mapping[str, Callable[[], str]]]
    """Pod name -> a function returning its ``/metrics`` text (called each sample)."""
    period_s: float = 0.1
    samples: list[tuple[float, dict[str, set[str]]]] = field(default_factory=list)
    """(monotonic time, node -> pods with a live worker for it)."""
    _halt: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> MetricsSampler:
        self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            while not self._halt.wait(self.period_s):
                # All pods at once, so that one sample is close to one instant: scraped
                # one after another, a handoff between two scrapes would look like an overlap.
                pods = dict(self.pods())
                pages = dict(zip(pods, pool.map(_scrape, pods.values()), strict=True))
                holders: dict[str, set[str]] = defaultdict(set)
                for pod, page in pages.items():
                    for node in worker_nodes(page):
                        holders[node].add(pod)
                self.samples.append((time.monotonic(), dict(holders)))

    def doubles(self) -> list[tuple[float, str, set[str]]]:
        return [(t, node, pods) for t, sample in self.samples for node, pods in sample.items()
                if len(pods) > 1]


NAMESPACE = "default"


def statefulset(name: str, replicas: int, namespace: str = NAMESPACE) -> dict[str, object]:
    """A minimal valid StatefulSet (no controller runs it: the driver starts the pods)."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "containers": [{"name": "agent", "image": "agentpool:test"}]}}},
    }


@dataclass(frozen=True)
class Timings:
    """The agents' lease and stop timings (short, so that tests and benchmarks are quick).

    The lease outlasts the renew period by 7 s: a supervisor loop busy
    starting a hundred workers on two loaded cores can take several seconds
    to turn, and a pod whose loop does not turn stops renewing, then fences.
    """

    lease_s: float = 8.0
    renew_s: float = 1.0
    shutdown_s: float = 3.0
    interval_s: float = 1.0


class PoolDriver:
    """A StatefulSet and its pods, driven by hand as its controller and the kubelet would."""

    def __init__(self, cluster: SimCluster, nodes: list[str], timings: Timings = Timings(),
                 assignment: str = "rendezvous",
                 namespace: str = NAMESPACE) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.nodes = nodes
        self.timings = timings
        self.assignment = assignment
        self.name = f"pool{uuid.uuid4().hex[:5]}"
        self.pods: dict[str, AgentProcess] = {}
        cluster.api.create("statefulsets", statefulset(self.name, 2, namespace))

    def start(self, ordinal: int) -> AgentProcess:
        name = f"{self.name}-{ordinal}"
        t = self.timings
        agent = self.cluster.start_agent(env={
            "POOL_MEMBERSHIP": "lease", "POD_NAME": name, "POD_NAMESPACE": self.namespace,
            "POOL_ASSIGNMENT": str(self.assignment),
            "POOL_LEASE_DURATION": f"{t.lease_s:g}s", "POOL_LEASE_RENEW": f"{t.renew_s:g}s",
            "SHUTDOWN_TIMEOUT": f"{t.shutdown_s:g}s", "RECONCILE_INTERVAL": f"{t.interval_s:g}s",
        }, name=name)
        self.pods[name] = agent
        return agent

    def scale(self, replicas: int) -> None:
        """Write the StatefulSet's ``spec.replicas`` (pods are started by :meth:`start`)."""
        self.cluster.api.patch(
            "statefulsets", self.name, {"spec": {"replicas": replicas}}, namespace=self.namespace)

    def members(self, replicas: int) -> list[str]:
        return [f"{self.name}-{i}" for i in range(replicas)]

    def scrapers(self) -> dict[str, Callable[[], str]]:
        return {name: agent.metrics for name, agent in list(self.pods.items())
                if agent.process.poll() is None}

    def holders(self) -> dict[str, set[str]] | None:
        """node -> pods with a live worker for it (None while a pod does not answer)."""
        found: dict[str, set[str]] = {}
        for name, agent in list(self.pods.items()):
            if agent.process.poll() is not None:
                continue
            try:
                nodes = worker_nodes(agent.metrics())
            except OSError:
                return None
            for node in nodes:
                found.setdefault(node, set()).add(name)
        return found

    def converged(self, members: list[str], since: float) -> bool:
        """Each node: a live worker in exactly the owner's pod, and a request from it since."""
        holders = self.holders()
        if holders is None:
            return False
        expected = {node: expected_owner(node, members, self.assignment) for node in self.nodes}
        if any(holders.get(node) != {owner} for node, owner in expected.items()):
            return False
        acted = {(r.node, pod_of(r.user_agent)) for r in self.cluster.power.requests()
                 if r.monotonic >= since}
        return all((node, owner) in acted for node, owner in expected.items())

    def cleanup(self) -> None:
        """Stop every pod (SIGTERM), delete the StatefulSet and the pods' Leases."""
        for agent in self.pods.values():
            agent.terminate()
        api = self.cluster.api
        for resource, name in [("statefulsets", self.name),
                               *(("leases", pod) for pod in self.pods)]:
            try:
                api.delete(resource, name, namespace=self.namespace)
            except ApiError as exc:  # never created, or already gone
                if exc.code != 404:
                    raise
