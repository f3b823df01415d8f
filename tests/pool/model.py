"""A model of a pool for checking the handoff rules: pods, one lease store, a fake clock.

Each pod is the production :class:`~agentpool.pool.state.PoolState`; what is
modelled is only the world around it. The lease store is linearizable (as
etcd behind the apiserver is), but requests take time: a write is sent,
committed and acknowledged in three steps (the acknowledgement may be lost),
a read is begun, served and delivered in three, and other steps interleave.
A write is conditional on the renewal it was based on, as the LeaseClient's
resourceVersion precondition makes it: one overtaken by another is refused.

A worker is "controlling" from the moment it is started until its stop is
confirmed, or until the write limit of the fence it holds
(:func:`~agentpool.pool.fence.worker_fence`, what the supervisor sends it at
start and after each renewal) has passed: then it has stopped on its own. A
pod's supervisor SIGKILLs a worker still stopping after its SHUTDOWN_TIMEOUT,
but only while its loop turns. A crashed pod's workers die with it (the
kubelet kills the whole container).

Loops do not always turn: a pod may *stall* (a stopped process, a system
call that never returns) for any time. While stalled it renews, reads,
confirms and kills nothing, and its workers learn of no renewal; its
requests already sent are still served. Each pod's clock runs at its own
rate, within :data:`~agentpool.pool.fence.CLOCK_RATE_ERROR` of real time,
from its own origin: every time a pod's state sees is on its own clock. Each
pod has its own SHUTDOWN_TIMEOUT and publishes the grace it implies.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from agentpool.pool.assignment import Assignment
from agentpool.pool.fence import CLOCK_RATE_ERROR, FenceTimes, grace_for
from agentpool.pool.handoff import Actions, NodePhase
from agentpool.pool.membership import LeaseRecord
from agentpool.pool.state import LeaseWrite, PoolState

DURATION_S = 10.0
RENEW_S = 2.0
SHUTDOWN_S = 4.0
GRACE_S = grace_for(SHUTDOWN_S)
TURN_S = 0.5


@dataclass
class Stored:
    holder: str | None
    renewal: int
    claims: frozenset[str]
    view: str
    grace: float | None = None


@dataclass
class Pod:
    name: str
    state: PoolState
    shutdown_s: float = SHUTDOWN_S
    rate: float = 1.0
    """How fast its clock runs against the world's."""
    origin: float = 0.0
    """Its clock's reading at world time 0."""
    alive: bool = True
    partitioned: bool = False
    stalled_until: float = 0.0
    """World time until which its loop does not turn."""
    running: set[str] = field(default_factory=set)
    stopping: dict[str, float] = field(default_factory=dict)
    """Node -> when the supervisor SIGKILLs the worker if it has not stopped by then."""
    fences: dict[str, FenceTimes] = field(default_factory=dict)
    """Node -> the fence its worker holds (on this pod's clock)."""
    exited: set[str] = field(default_factory=set)
    """Workers that stopped on their own, not yet noticed by the (stalled) loop."""
    sending: tuple[LeaseWrite, float, int | None] | None = None
    """A write in flight: what it carries, when it was sent (this pod's clock), and the
    renewal it was based on (its resourceVersion precondition)."""
    committed: tuple[LeaseWrite, float] | None = None
    """A write the store took, not yet acknowledged to the pod."""
    reading: int | None = None
    """A read in flight: ``handoff.writes`` when it began."""
    served: tuple[int, list[LeaseRecord]] | None = None
    """A read the store answered, not yet delivered to the pod."""

    def clock(self, now: float) -> float:
        return self.origin + self.rate * now

    def world_time(self, local: float) -> float:
        return (local - self.origin) / self.rate

    def stalled(self, now: float) -> bool:
        return now < self.stalled_until

    def controlling(self) -> set[str]:
        return self.running | set(self.stopping)


class DoubleControlError(AssertionError):
    pass


class World:
    """``fences``: workers stop on their own at their fence (False: as before issue 23, they
    tick on while their loop is stalled). ``publish_grace``: pods publish their grace and
    peers use it (False: peers use their own). ``rate_error``: pods' clock rates are drawn
    within this of real time. ``shutdowns``: each pod's SHUTDOWN_TIMEOUT is drawn from these.
    """

    def __init__(
        self,
        nodes: list[str],
        assignment: Assignment = Assignment.RENDEZVOUS,
        fences: bool = True,
        publish_grace: bool = True,
        rate_error: float = CLOCK_RATE_ERROR,
        shutdowns: tuple[float, ...] = (SHUTDOWN_S,),
        seed: int = 0,
    ) -> None:
        self.nodes = nodes
        self.assignment = assignment
        self.fences = fences
        self.publish_grace = publish_grace
        self.rate_error = rate_error
        self.shutdowns = shutdowns
        self.rng = random.Random(seed)
        self.now = 0.0
        self.store: dict[str, Stored] = {}
        self.pods: dict[str, Pod] = {}
        self.replicas: int | None = None
        self.log: list[str] = []

    # -- pods ----------------------------------------------------------------------------

    def start(self, name: str, shutdown: float | None = None, rate: float | None = None) -> None:
        """Start (or restart) a pod: it resumes the claims its lease still carries.
        ``shutdown`` and ``rate`` are drawn (see :class:`World`) unless given."""
        stored = self.store.get(name)
        resumed = stored.claims if stored is not None and stored.holder == name else frozenset()
        if shutdown is None:
            shutdown = self.rng.choice(self.shutdowns)
        if rate is None:
            # The extremes are the worst case: drawn as often as anything in between.
            rate = 1 + self.rng.choice([-1.0, 1.0, self.rng.uniform(-1, 1)]) * self.rate_error
        origin = self.rng.uniform(0, 10_000)
        local = origin + rate * self.now
        state = PoolState(name, self.assignment, DURATION_S, RENEW_S, grace_for(shutdown),
                          resumed)
        state.set_replicas(self.replicas, local)
        state.turn(self.nodes, local)
        self.pods[name] = Pod(name, state, shutdown, rate, origin)
        self.log.append(f"{self.now:.1f} start {name} shutdown={shutdown:g} rate={rate:.4f} "
                        f"resumed={sorted(resumed)}")

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

    def stall(self, name: str, seconds: float) -> None:
        """The pod's loop stops turning for ``seconds`` (its workers run on)."""
        pod = self.pods[name]
        pod.stalled_until = max(pod.stalled_until, self.now + seconds)
        self.log.append(f"{self.now:.1f} {name} stalled until {pod.stalled_until:.1f}")

    def set_replicas(self, replicas: int | None) -> None:
        self.replicas = replicas
        for pod in self.turning_pods():
            self._apply(pod, pod.state.set_replicas(replicas, pod.clock(self.now)))

    def live_pods(self) -> list[Pod]:
        return [pod for pod in self.pods.values() if pod.alive]

    def turning_pods(self) -> list[Pod]:
        return [pod for pod in self.live_pods() if not pod.stalled(self.now)]

    def _reachable(self, pod: Pod) -> bool:
        return pod.alive and not pod.partitioned and not pod.stalled(self.now)

    # -- steps ---------------------------------------------------------------------------

    def _fence(self, pod: Pod) -> FenceTimes | None:
        return pod.state.worker_fence(pod.shutdown_s) if self.fences else None

    def _apply(self, pod: Pod, actions: Actions) -> None:
        for node in actions.stop:
            if node in pod.running:
                pod.running.discard(node)
                pod.stopping.setdefault(node, self.now + pod.shutdown_s + TURN_S)
            elif node not in pod.stopping:  # its worker is gone already: nothing to stop
                pod.exited.discard(node)
                pod.state.stopped(node)
        fence = self._fence(pod)
        for node in actions.start:
            pod.running.add(node)
            if fence is not None:
                pod.fences[node] = fence
        if actions:
            self.log.append(f"{self.now:.1f} {pod.name} start={sorted(actions.start)} "
                            f"stop={sorted(actions.stop)}")
        self.check()

    def _expire(self, pod: Pod) -> None:
        """Workers whose fence's write limit passed have stopped on their own."""
        for node in list(pod.controlling()):
            fence = pod.fences.get(node)
            if fence is None or fence.write_until is None:
                continue
            if pod.world_time(fence.write_until) <= self.now:
                pod.running.discard(node)
                pod.stopping.pop(node, None)
                del pod.fences[node]
                pod.exited.add(node)
                self.log.append(f"{self.now:.1f} {pod.name} worker of {node} fenced itself")

    def _turn(self, pod: Pod) -> None:
        """One supervisor turn: notice workers that stopped on their own, turn the state,
        give every worker the current fence."""
        local = pod.clock(self.now)
        if pod.state.replicas != self.replicas:  # the watch's news, queued while stalled
            self._apply(pod, pod.state.set_replicas(self.replicas, local))
        for node in sorted(pod.exited):
            pod.exited.discard(node)
            phase = pod.state.handoff.phase(node)
            if phase is NodePhase.RELEASING:
                pod.state.stopped(node)
            elif phase is NodePhase.RUNNING:
                fence = self._fence(pod)
                if fence is not None and fence.stop_at > local:  # restarted: still its own
                    pod.running.add(node)
                    pod.fences[node] = fence
                    self.log.append(f"{self.now:.1f} {pod.name} restarts {node}")
                    self.check()
                else:
                    pod.exited.add(node)  # the handoff fences it this turn; noticed next turn
        for node, deadline in list(pod.stopping.items()):
            if deadline <= self.now:
                self.confirm_stop(pod.name, node)  # SIGKILLed at the deadline
        self._apply(pod, pod.state.turn(self.nodes, local))
        fence = self._fence(pod)
        if fence is not None:
            for node in pod.controlling():
                pod.fences[node] = fence

    def advance(self, dt: float) -> None:
        """Let time pass in steps of at most TURN_S, every turning loop turning after each."""
        end = self.now + dt
        while self.now < end:
            self.now = min(end, self.now + TURN_S)
            for pod in self.pods.values():
                self._expire(pod)
            self.check()
            for pod in self.turning_pods():
                self._turn(pod)

    def write(self, name: str) -> bool:
        pod = self.pods[name]
        if not self._reachable(pod):
            return False
        write = pod.state.next_write()
        self._store(pod, write)
        pod.state.written(pod.clock(self.now), write)
        return True

    def _store(self, pod: Pod, write: LeaseWrite) -> None:
        renewal = self.store[pod.name].renewal + 1 if pod.name in self.store else 1
        grace = grace_for(pod.shutdown_s) if self.publish_grace else None
        self.store[pod.name] = Stored(pod.name, renewal, write.claims, write.view, grace)

    def read(self, name: str) -> bool:
        pod = self.pods[name]
        if not self._reachable(pod):
            return False
        records = self._records()
        self._apply(pod, pod.state.read(pod.state.handoff.writes, records, pod.clock(self.now)))
        return True

    def _records(self) -> list[LeaseRecord]:
        return [
            LeaseRecord(lease, s.holder, DURATION_S, str(s.renewal), s.claims, s.view,
                        grace_s=s.grace)
            for lease, s in self.store.items()
        ]

    # Requests in flight: each phase is a separate step, so others interleave. Sending
    # and delivering need the pod's loop; the server's part goes on while it is stalled.

    def send_write(self, pod: Pod) -> None:
        if pod.sending is None and pod.committed is None and not pod.stalled(self.now):
            stored = self.store.get(pod.name)
            pod.sending = (pod.state.next_write(), pod.clock(self.now),
                           stored.renewal if stored is not None else None)

    def commit_write(self, pod: Pod, acknowledged: bool) -> None:
        if pod.sending is None:
            return
        write, sent_at, based_on = pod.sending
        pod.sending = None
        if pod.partitioned:
            return  # never reached the server
        stored = self.store.get(pod.name)
        if (stored.renewal if stored is not None else None) != based_on:
            return  # 409 Conflict: the Lease changed since (LeaseClient writes conditionally)
        self._store(pod, write)
        if acknowledged:
            pod.committed = (write, sent_at)

    def ack_write(self, pod: Pod) -> None:
        if pod.committed is not None and not pod.stalled(self.now):
            write, sent_at = pod.committed
            pod.committed = None
            pod.state.written(sent_at, write)

    def begin_read(self, pod: Pod) -> None:
        if pod.reading is None and pod.served is None and not pod.stalled(self.now):
            pod.reading = pod.state.handoff.writes

    def serve_read(self, pod: Pod) -> None:
        if pod.reading is not None:
            if not pod.partitioned:
                pod.served = (pod.reading, self._records())
            pod.reading = None

    def deliver_read(self, pod: Pod) -> None:
        if pod.served is not None and not pod.stalled(self.now):
            writes_before, records = pod.served
            pod.served = None
            self._apply(pod, pod.state.read(writes_before, records, pod.clock(self.now)))

    def confirm_stop(self, name: str, node: str) -> None:
        """The worker of ``node`` finished stopping (its loop notices when it turns)."""
        pod = self.pods[name]
        if node in pod.stopping:
            del pod.stopping[node]
            pod.fences.pop(node, None)
            if not pod.alive:
                return
            if pod.stalled(self.now):
                pod.exited.add(node)
            else:
                pod.state.stopped(node)

    def round(self) -> None:
        """One fair round: every turning pod renews and reads, pending stops complete."""
        for pod in self.turning_pods():
            self.write(pod.name)
        for pod in self.turning_pods():
            self.read(pod.name)
        for pod in self.turning_pods():
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
        for pod in self.pods.values():
            self._expire(pod)
        for node, pods in self.controllers().items():
            if len(pods) > 1:
                tail = "\n".join(self.log[-30:])
                raise DoubleControlError(f"{node} controlled by {pods} at t={self.now:.1f}\n{tail}")

    def random_step(self, rng: random.Random, names: list[str], stalls: bool = False) -> None:
        """One step of chaos: any pod may renew, read, stop, crash, restart, be cut off or,
        with ``stalls``, stop turning for a while."""
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
            if stalls and rng.random() < 0.5:
                self.round()  # renewals go on at their pace while one loop is stalled
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
        elif stalls and roll < 0.97:
            self.stall(name, rng.choice([rng.uniform(0.5, 5.0), rng.uniform(5.0, 40.0)]))
