"""Elastic pool pods, lease I/O included, on the emulator and on a real kube-apiserver.

Each "pod" here is the production :class:`~agentpool.supervisor.elastic.ElasticPool`
with its :class:`~agentpool.kube.leases.LeaseClient` and
:class:`~agentpool.kube.leases.ReplicasWatch`, talking HTTP through the real
``kubernetes`` client, driven by a loop thread that turns every 20 ms as the
supervisor's does. What is not real is the worker: a start or stop is an
entry in a shared table (a stop takes 100 ms, as restoring host values
does), which is what the sampler checks for double control every 10 ms.
The full agent with worker processes is tested in the supervisor tests.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from agentpool.config.options import Membership
from agentpool.config.settings import ElasticSettings
from agentpool.kube.api import KubeApi, load_client
from agentpool.kube.leases import LeaseClient, ReplicasWatch
from agentpool.pool.assignment import Assignment, owner_of
from agentpool.sim.polling import wait_until
from agentpool.supervisor.elastic import ElasticPool, takeover_bound_s
from tests.support.apiservers import Backend

# Real processes and servers: minutes on 2 busy cores, above the default per-test limit.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

NS = "default"
NODES = [f"node-{i}" for i in range(24)]
STOP_S = 0.1
GRACE_S = 1.0
ELASTIC = ElasticSettings(Membership.LEASE, Assignment.RENDEZVOUS, lease_duration_s=2.0,
                          renew_s=0.5, namespace=NS)


class Table:
    """Who controls which node, with every violation remembered."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owners: dict[str, set[str]] = {}
        self.violations: list[str] = []

    def start(self, pod: str, node: str) -> None:
        with self.lock:
            holders = self.owners.setdefault(node, set())
            if holders - {pod}:
                self.violations.append(f"{pod} started {node} held by {sorted(holders)}")
            holders.add(pod)

    def stop(self, pod: str, node: str) -> None:
        with self.lock:
            self.owners.get(node, set()).discard(pod)

    def drop(self, pod: str) -> None:
        with self.lock:
            for holders in self.owners.values():
                holders.discard(pod)

    def snapshot(self) -> dict[str, set[str]]:
        with self.lock:
            return {node: set(pods) for node, pods in self.owners.items()}


class Pod:
    def __init__(self, name: str, pool: str, kubeconfig: Path, table: Table) -> None:
        self.name = name
        self.table = table
        self.api = KubeApi(load_client(str(kubeconfig)), namespace=NS)
        leases = LeaseClient(self.api, name, pool, 2.0, GRACE_S)
        self.elastic = ElasticPool(ELASTIC, leases, GRACE_S)
        self.watch = ReplicasWatch(self.api, pool, self.elastic.replicas, watch_timeout_s=30)
        self.stopping: dict[str, float] = {}
        self.running: set[str] = set()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> Pod:
        self.elastic.start()
        self.watch.start()
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._halt.is_set():
            actions = self.elastic.turn(NODES)
            for node in actions.stop:
                self.running.discard(node)
                self.stopping[node] = time.monotonic() + STOP_S
            for node in actions.start:
                self.table.start(self.name, node)
                self.running.add(node)
            for node, done in list(self.stopping.items()):
                if time.monotonic() >= done:
                    del self.stopping[node]
                    self.table.stop(self.name, node)
                    self.elastic.stopped(node)
            self._halt.wait(0.02)

    def shutdown(self) -> None:
        """SIGTERM: stop every node, then release the lease."""
        self._halt.set()
        self._thread.join(5)
        self.table.drop(self.name)
        self.watch.stop()
        self.elastic.close(release=True)
        self.api.close()

    def kill(self) -> None:
        """SIGKILL: the nodes stop with the container; the lease is left as it was."""
        self._halt.set()
        self._thread.join(5)
        self.table.drop(self.name)
        self.watch.stop()
        self.elastic.close(release=False)
        self.api.close()


class Sampler:
    """Samples the table every 10 ms and records any node with two controllers."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.doubles: list[tuple[str, set[str]]] = []
        self.samples = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._halt.wait(0.01):
            self.samples += 1
            for node, pods in self.table.snapshot().items():
                if len(pods) > 1:
                    self.doubles.append((node, pods))

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(2)


def statefulset(name: str, replicas: int) -> dict[str, object]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
        "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "containers": [{"name": "agent", "image": "agentpool:test"}]}}},
    }


@pytest.fixture
def pool(backend: Backend) -> Iterator[str]:
    name = f"pool{uuid.uuid4().hex[:6]}"
    apps = client.AppsV1Api(backend.client)
    apps.create_namespaced_stateful_set(NS, statefulset(name, 2))
    yield name
    apps.delete_namespaced_stateful_set(name, NS)
    coord = client.CoordinationV1Api(backend.client)
    for lease in coord.list_namespaced_lease(NS, label_selector=f"agentpool.joulie.io/pool={name}"
                                             ).items:
        coord.delete_namespaced_lease(lease.metadata.name, NS)


def converged(table: Table, members: list[str]) -> bool:
    owners = table.snapshot()
    return all(owners.get(node) == {owner_of(node, members, Assignment.RENDEZVOUS)}
               for node in NODES)


def test_scaling_2_3_5_2_hands_nodes_over_without_overlap(
    backend: Backend, pool: str
) -> None:
    table = Table()
    sampler = Sampler(table)
    apps = client.AppsV1Api(backend.client)
    pods: dict[str, Pod] = {}
    try:
        for size in (2, 3, 5, 2):
            apps.patch_namespaced_stateful_set_scale(pool, NS, {"spec": {"replicas": size}})
            for i in range(size):
                name = f"{pool}-{i}"
                if name not in pods:
                    pods[name] = Pod(name, pool, backend.kubeconfig, table).start()
            members = [f"{pool}-{i}" for i in range(size)]
            # Converging after a resize is bounded by 30 s (docs/modes.md: elastic pool).
            wait_until(lambda m=members: converged(table, m), 30)  # type: ignore[misc]
            for name in [n for n in pods if n not in members]:
                # Scaled away: it handed its nodes over while running; now it is stopped.
                assert not pods[name].running
                pods.pop(name).shutdown()
    finally:
        sampler.stop()
        for pod in pods.values():
            pod.shutdown()
    assert sampler.samples > 100
    assert not table.violations
    assert not sampler.doubles


def test_a_killed_pods_nodes_are_taken_over_within_the_bound_and_it_resumes(
    backend: Backend, pool: str
) -> None:
    table = Table()
    sampler = Sampler(table)
    names = [f"{pool}-{i}" for i in range(2)]
    pods = {name: Pod(name, pool, backend.kubeconfig, table).start() for name in names}
    try:
        wait_until(lambda: converged(table, names), 30)
        victim = pods.pop(names[1])
        lost = set(victim.running)
        victim.kill()
        killed_at = time.monotonic()
        wait_until(lambda: converged(table, names[:1]), 30)
        took = time.monotonic() - killed_at
        bound = takeover_bound_s(ELASTIC, GRACE_S)
        # Not before the lease expired plus the grace; the upper bound with 5x headroom for a
        # loaded 2-core box.
        assert took >= ELASTIC.lease_duration_s + GRACE_S - ELASTIC.renew_s
        assert took < 5 * bound
        assert lost
        # Back under the same name: the survivor hands its nodes back, nothing overlaps.
        pods[names[1]] = Pod(names[1], pool, backend.kubeconfig, table).start()
        wait_until(lambda: converged(table, names), 30)
    finally:
        sampler.stop()
        for pod in pods.values():
            pod.shutdown()
    assert not table.violations
    assert not sampler.doubles


def test_a_quickly_restarted_pod_resumes_its_nodes_without_a_handoff(
    backend: Backend, pool: str
) -> None:
    table = Table()
    names = [f"{pool}-{i}" for i in range(2)]
    pods = {name: Pod(name, pool, backend.kubeconfig, table).start() for name in names}
    try:
        wait_until(lambda: converged(table, names), 30)
        first = pods.pop(names[0])
        mine = set(first.running)
        first.kill()
        pods[names[0]] = again = Pod(names[0], pool, backend.kubeconfig, table).start()
        # Its lease still claims them and has not expired: one renewal and one read later
        # they run again, before the 2 s lease could have expired.
        wait_until(lambda: again.running == mine, ELASTIC.lease_duration_s * 5)
        survivor = pods[names[1]]
        assert not survivor.running & mine
    finally:
        for pod in pods.values():
            pod.shutdown()
    assert not table.violations


def test_a_pod_that_cannot_renew_stops_its_nodes_before_the_others_take_them(
    backend: Backend, pool: str
) -> None:
    if backend.name != "emulator":
        pytest.skip("needs the emulator's fault injection")
    emulator = backend.direct
    table = Table()
    names = [f"{pool}-{i}" for i in range(2)]
    pods = {name: Pod(name, pool, backend.kubeconfig, table).start() for name in names}
    try:
        wait_until(lambda: converged(table, names), 30)
        cut = pods[names[0]]
        # Its renewals fail from now on (a partition between it and the API server).
        emulator.inject(verb="update", resource="leases", name=names[0], times=None)  # type: ignore[attr-defined]
        cut_at = time.monotonic()
        wait_until(lambda: not cut.running and not cut.stopping, 10)
        stopped_after = time.monotonic() - cut_at
        # It stopped by itself, within duration - renew of its last renewal plus the stops.
        assert stopped_after < ELASTIC.lease_duration_s + STOP_S + 5 * 0.5, stopped_after
        wait_until(lambda: converged(table, names[1:]), 30)
        emulator.clear_faults()  # type: ignore[attr-defined]
        wait_until(lambda: converged(table, names), 30)
    finally:
        for pod in pods.values():
            pod.shutdown()
    assert not table.violations


def test_renewals_stop_when_the_loop_stops_turning(backend: Backend, pool: str) -> None:
    table = Table()
    pod = Pod(f"{pool}-0", pool, backend.kubeconfig, table)
    pod.elastic.start()
    coord = client.CoordinationV1Api(backend.client)
    try:
        wait_until(lambda: pod.elastic.turn(NODES) is not None and pod.running == set()
                   and _renew_time(coord, pod.name) is not None, 10)
        for _ in range(10):  # a few turns: renewals happen
            pod.elastic.turn(NODES)
            time.sleep(0.1)
        # The last turns may have handed the thread a renewal: turned until its end is
        # seen (a renewal, then a list of the pool's Leases, can take longer than a
        # turn's 0.1 s on a loaded machine), then no more.
        wait_until(lambda: pod.elastic.turn(NODES) is not None
                   and not pod.elastic.cycle_in_flight, 10)
        first = _renew_time(coord, pod.name)
        # No turns for three renew periods: the thread must not renew by itself.
        time.sleep(3 * ELASTIC.renew_s)
        assert _renew_time(coord, pod.name) == first
        wait_until(lambda: pod.elastic.turn(NODES) is not None
                   and _renew_time(coord, pod.name) != first, 10)
    finally:
        pod.elastic.close(release=False)
        pod.api.close()


def _renew_time(coord: client.CoordinationV1Api, name: str) -> object:
    try:
        return coord.read_namespaced_lease(name, NS).spec.renew_time
    except client.ApiException:
        return None


class RecordingLeases(LeaseClient):
    """The production LeaseClient, recording which thread calls it and when (it is not
    thread safe: no two calls may overlap)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.calls: list[tuple[str, str, float, float]] = []
        self._lock = threading.Lock()

    def _record(self, what: str, began: float) -> None:
        with self._lock:
            self.calls.append((what, threading.current_thread().name, began, time.monotonic()))

    def write(self, claims: frozenset[str], view: str, holder: str | None = "") -> None:
        began = time.monotonic()
        try:
            super().write(claims, view, holder)
        finally:
            self._record("release" if holder is None else "write", began)


def test_close_releases_from_the_lease_thread_after_the_request_in_flight(
    backend: Backend, pool: str
) -> None:
    if backend.name != "emulator":
        pytest.skip("needs the emulator's fault injection")
    api = KubeApi(load_client(str(backend.kubeconfig)), namespace=NS)
    leases = RecordingLeases(api, f"{pool}-0", pool, 2.0, GRACE_S)
    elastic = ElasticPool(ELASTIC, leases, GRACE_S)
    elastic.start()
    try:
        wait_until(lambda: elastic.turn(NODES) is not None
                   and any(c[0] == "write" for c in leases.calls), 10)
        # The next renewal takes 7 s (a slow API server): longer than close() used to wait.
        before = len(leases.calls)
        rule = backend.direct.inject(  # type: ignore[attr-defined]
            verb="update", resource="leases", fault="slow", delay=7.0, times=1)
        # Turn until the lease thread sent that renewal (the server took the fault).
        wait_until(lambda: elastic.turn(NODES) is not None and rule.remaining == 0, 10)
        elastic.close(release=True)
    finally:
        api.close()
    new = leases.calls[before:]
    assert [c[0] for c in new] == ["write", "release"], new
    (write, release) = new
    assert release[1] == "pool-leases"  # the thread that owns the client
    assert release[2] >= write[3]  # after the slow renewal came back, not during it
    lease = client.CoordinationV1Api(backend.client).read_namespaced_lease(f"{pool}-0", NS)
    assert lease.spec.holder_identity is None
