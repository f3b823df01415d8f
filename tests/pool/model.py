"""A model of a pool for checking the handoff rules: pods, one lease store, a fake clock.

Each pod is the production :class:`~agentpool.pool.state.PoolState`; what is
modelled is only the world around it. The lease store is linearizable (as
etcd behind the apiserver is), but requests take time: a write is sent,
committed and acknowledged in three steps (the acknowledgement may be lost),
a read is begun, served and delivered in three, and other steps interleave. A worker
is "controlling" from the moment it is started until its stop is confirmed;
the supervisor SIGKILLs a worker still stopping after the shutdown grace, so
the model removes it then at the latest. A crashed pod's workers die with it
(the kubelet kills the whole container). Every pod's loop turns at least
once per :data:`TURN_S` of model time, as the supervisor loop does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from agentpool.pool.assignment import Assignment
from agentpool.pool.handoff import Actions
from agentpool.pool.membership import LeaseRecord
from agentpool.pool.state import LeaseWrite, PoolState

DURATION_S = 10.0
RENEW_S = 2.0
GRACE_S = 5.0
TURN_S = 0.5


@dataclass
class Stored:
    holder: str | None
    renewal: int
    claims: frozenset[str]
    view: str


@dataclass
class Pod:
    name: str
    state: PoolState
    alive: bool = True
    partitioned: bool = False
    running: set[str] = field(default_factory=set)
    stopping: dict[str, float] = field(default_factory=dict)
    """Node -> when the supervisor SIGKILLs the worker if it has not stopped by then."""
    sending: tuple[LeaseWrite, float] | None = None
    """A write in flight: what it carries, when it was sent."""
    committed: tuple[LeaseWrite, float] | None = None
    """A write the store took, not yet acknowledged to the pod."""
    reading: int | None = None
    """A read in flight: ``handoff.writes`` when it began."""
    served: tuple[int, list[LeaseRecord]] | None = None
    """A read the store answered, not yet delivered to the pod."""

    def controlling(self) -> set[str]:
        return self.running | set(self.stopping)


class DoubleControlError(AssertionError):
    pass


class World:
    def __init__(self, nodes: list[str], assignment: Assignment = Assignment.RENDEZVOUS) -> None:
        self.nodes = nodes
        self.assignment = assignment
        self.now = 0.0
        self.store: dict[str, Stored] = {}
        self.pods: dict[str, Pod] = {}
        self.replicas: int | None = None
        self.log: list[str] = []

    # -- pods ----------------------------------------------------------------------------

    def _state(self, name: str, resumed: frozenset[str]) -> PoolState:
        state = PoolState(name, self.assignment, DURATION_S, RENEW_S, GRACE_S, resumed)
        state.set_replicas(self.replicas, self.now)
        state.turn(self.nodes, self.now)
        return state

    def start(self, name: str) -> None:
        """Start (or restart) a pod: it resumes the claims its lease still carries."""
        stored = self.store.get(name)
        resumed = stored.claims if stored is not None and stored.holder == name else frozenset()
        self.pods[name] = Pod(name, self._state(name, resumed))
        self.log.append(f"{self.now:.1f} start {name} resumed={sorted(resumed)}")

    def crash(self, name: str) -> None:
        pod = self.pods[name]
        pod.alive = False
        pod.running.clear()
        pod.stopping.clear()
        self.log.append(f"{self.now:.1f} crash {name}")

    def exit_gracefully(self, name: str) -> None:
        """SIGTERM: stop every worker (confirmed), then release the lease."""
        pod = self.pods[name]
        pod.running.clear()
        pod.stopping.clear()
        pod.alive = False
        if not pod.partitioned and name in self.store:
            self.store[name] = Stored(None, self.store[name].renewal + 1, frozenset(), "")
        self.log.append(f"{self.now:.1f} exit {name}")

    def set_replicas(self, replicas: int | None) -> None:
        self.replicas = replicas
        for pod in self.live_pods():
            self._apply(pod, pod.state.set_replicas(replicas, self.now))

    def live_pods(self) -> list[Pod]:
        return [pod for pod in self.pods.values() if pod.alive]

    # -- steps ---------------------------------------------------------------------------

    def _apply(self, pod: Pod, actions: Actions) -> None:
        for node in actions.stop:
            pod.running.discard(node)
            pod.stopping.setdefault(node, self.now + GRACE_S)
        for node in actions.start:
            pod.running.add(node)
        if actions:
            self.log.append(f"{self.now:.1f} {pod.name} start={sorted(actions.start)} "
                            f"stop={sorted(actions.stop)}")
        self.check()

    def advance(self, dt: float) -> None:
        """Let time pass in steps of at most TURN_S, every live loop turning after each."""
        end = self.now + dt
        while self.now < end:
            self.now = min(end, self.now + TURN_S)
            for pod in self.pods.values():
                for node, deadline in list(pod.stopping.items()):
                    if deadline <= self.now:
                        self.confirm_stop(pod.name, node)  # SIGKILLed at the deadline
            for pod in self.live_pods():
                self._apply(pod, pod.state.turn(self.nodes, self.now))

    def write(self, name: str) -> bool:
        pod = self.pods[name]
        if not pod.alive or pod.partitioned:
            return False
        write = pod.state.next_write()
        renewal = self.store[name].renewal + 1 if name in self.store else 1
        self.store[name] = Stored(name, renewal, write.claims, write.view)
        pod.state.written(self.now, write)
        return True

    def read(self, name: str) -> bool:
        pod = self.pods[name]
        if not pod.alive or pod.partitioned:
            return False
        self._apply(pod, pod.state.read(pod.state.handoff.writes, self._records(), self.now))
        return True

    def _records(self) -> list[LeaseRecord]:
        return [
            LeaseRecord(lease, s.holder, DURATION_S, str(s.renewal), s.claims, s.view)
            for lease, s in self.store.items()
        ]

    # Requests in flight: each phase is a separate step, so others interleave.

    def send_write(self, pod: Pod) -> None:
        if pod.sending is None and pod.committed is None:
            pod.sending = (pod.state.next_write(), self.now)

    def commit_write(self, pod: Pod, acknowledged: bool) -> None:
        if pod.sending is None:
            return
        write, sent_at = pod.sending
        pod.sending = None
        if pod.partitioned:
            return  # never reached the server
        renewal = self.store[pod.name].renewal + 1 if pod.name in self.store else 1
        self.store[pod.name] = Stored(pod.name, renewal, write.claims, write.view)
        if acknowledged:
            pod.committed = (write, sent_at)

    def ack_write(self, pod: Pod) -> None:
        if pod.committed is not None:
            write, sent_at = pod.committed
            pod.committed = None
            pod.state.written(sent_at, write)

    def begin_read(self, pod: Pod) -> None:
        if pod.reading is None and pod.served is None:
            pod.reading = pod.state.handoff.writes

    def serve_read(self, pod: Pod) -> None:
        if pod.reading is not None:
            if not pod.partitioned:
                pod.served = (pod.reading, self._records())
            pod.reading = None

    def deliver_read(self, pod: Pod) -> None:
        if pod.served is not None:
            writes_before, records = pod.served
            pod.served = None
            self._apply(pod, pod.state.read(writes_before, records, self.now))

    def confirm_stop(self, name: str, node: str) -> None:
        pod = self.pods[name]
        if node in pod.stopping:
            del pod.stopping[node]
            if pod.alive:
                pod.state.stopped(node)

    def round(self) -> None:
        """One fair round: every live pod renews and reads, pending stops complete."""
        for pod in self.live_pods():
            self.write(pod.name)
        for pod in self.live_pods():
            self.read(pod.name)
        for pod in self.live_pods():
            for node in list(pod.stopping):
                self.confirm_stop(pod.name, node)

    def settle(self, seconds: float = 60.0) -> None:
        """Fair rounds every RENEW_S for ``seconds`` of model time."""
        end = self.now + seconds
        while self.now < end:
            self.round()
            self.advance(RENEW_S)

    # -- checks --------------------------------------------------------------------------

    def controllers(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {node: [] for node in self.nodes}
        for pod in self.pods.values():
            for node in pod.controlling():
                found.setdefault(node, []).append(pod.name)
        return found

    def check(self) -> None:
        for node, pods in self.controllers().items():
            if len(pods) > 1:
                tail = "\n".join(self.log[-30:])
                raise DoubleControlError(f"{node} controlled by {pods} at t={self.now:.1f}\n{tail}")

    def random_step(self, rng: random.Random, names: list[str]) -> None:
        """One step of chaos: any pod may renew, read, stop, crash, restart or be cut off."""
        name = rng.choice(names)
        pod = self.pods.get(name)
        roll = rng.random()
        if pod is None or not pod.alive:
            if roll < 0.3:
                self.start(name)
            else:
                self.advance(rng.uniform(0.1, 3.0))
            return
        if roll < 0.25:
            step = rng.choice([self.send_write, self.ack_write, self.begin_read,
                               self.serve_read, self.deliver_read])
            step(pod)
        elif roll < 0.35:
            self.commit_write(pod, acknowledged=rng.random() < 0.9)
        elif roll < 0.45:
            if rng.random() < 0.5:
                self.write(name)
            else:
                self.read(name)
        elif roll < 0.6 and pod.stopping:
            self.confirm_stop(name, rng.choice(sorted(pod.stopping)))
        elif roll < 0.8:
            self.advance(rng.uniform(0.1, 3.0))
        elif roll < 0.85:
            pod.partitioned = not pod.partitioned
            self.log.append(f"{self.now:.1f} {name} partitioned={pod.partitioned}")
        elif roll < 0.88:
            self.crash(name)
        elif roll < 0.9:
            self.exit_gracefully(name)
        elif roll < 0.93:
            self.set_replicas(rng.choice([None, 1, 2, 3, len(names)]))
