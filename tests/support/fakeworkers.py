"""Stand-ins for worker processes and a clock, to drive the supervisor's loop by hand.

What is fake, and why: the worker *processes* (forking 1,000 real ones, or
making one hang, die or linger exactly when a rule says, cannot be done on
demand and in milliseconds) and the clock (so that "silent for 90 s" takes
no time). What is real: the supervisor itself, its epoll selector, each
worker's pipe (a real socket pair, whose other end the test holds) and exit
sentinel (a real pipe the stand-in closes when it "exits"), the ClusterView
fed with informer events, and the restart policy.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from agentpool.config.options import AgentMode
from agentpool.config.settings import Settings
from agentpool.kube.api import Resource
from agentpool.kube.informer import Change, Relisted
from agentpool.kube.nodehardware import HardwarePublisher
from agentpool.kube.writehold import WriteHold
from agentpool.resources.nodeinputs import NodeInputs
from agentpool.results import Backend, GpuTickResult, Result, TickResult
from agentpool.supervisor.clusterview import ClusterView
from agentpool.supervisor.collaborators import Cluster, Reporting, Spawning
from agentpool.supervisor.echoes import EventFeed
from agentpool.supervisor.handles import WorkerProcess
from agentpool.supervisor.loop import Supervisor
from agentpool.supervisor.loopio import LoopIO
from agentpool.supervisor.selfmetrics import ApiCounters, SupervisorCollector
from agentpool.worker.nodefiles import NodeFiles
from agentpool.worker.protocol import TickReport
from tests.support.clock import Clock

MANAGED = {"joulie.io/managed": "true"}
# Above the kernel's largest pid_max (2**22): no process ever has these pids.
_PIDS = itertools.count(10**9)


class FakeProcess:
    """A worker process as the supervisor sees it; ``exit`` fires its real sentinel."""

    def __init__(self, pid: int | None = None, obeys_sigterm: bool = True) -> None:
        self._pid = next(_PIDS) if pid is None else pid
        self._r, self._w = os.pipe()
        self._closed = False
        self._exitcode: int | None = None
        self.obeys_sigterm = obeys_sigterm
        self.signals: list[str] = []

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def exitcode(self) -> int | None:
        return self._exitcode

    @property
    def sentinel(self) -> int:
        return self._r

    def exit(self, code: int) -> None:
        if self._exitcode is None:
            self._exitcode = code
            os.close(self._w)

    def terminate(self) -> None:
        self.signals.append("SIGTERM")
        if self.obeys_sigterm:
            self.exit(-15)

    def kill(self) -> None:
        self.signals.append("SIGKILL")
        self.exit(-9)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self._r)

    def release(self) -> None:
        """The test is done with it: both ends of its sentinel closed, once."""
        if self._exitcode is None:
            self._exitcode = -9
            os.close(self._w)
        self.close()


class IdleProcess:
    """The process of a handle driven by hand, alive, with no sentinel: for tests that
    never signal it (its pid is made up) nor wait for it."""

    pid = 1234
    exitcode = None
    sentinel = -1

    def terminate(self) -> None: ...

    def kill(self) -> None: ...

    def close(self) -> None: ...


@dataclass
class FakeWorker:
    node: str
    process: FakeProcess
    pipe: Connection
    """The worker's end: the test reads what the supervisor sent and writes reports."""
    inputs: NodeInputs | None

    def report(self, result: Result = Result.APPLIED, gpu: GpuTickResult | None = None) -> None:
        tick = TickResult(Backend.RAPL, result, "ok", gpu=gpu)
        self.pipe.send(TickReport(self.node, tick, 0.01))


@dataclass
class FakeLauncher:
    """The supervisor's ``launch``: records each start; ``fail_with`` makes the next ones fail."""

    started: list[FakeWorker] = field(default_factory=list)
    supervisor_ends: list[Connection] = field(default_factory=list)
    """The supervisor's end of each pipe, closed with the test's loop."""
    fail_with: BaseException | None = None
    obeys_sigterm: bool = True
    pids: Iterator[int] | None = None

    def __call__(self, node: str, inputs: NodeInputs | None) -> tuple[WorkerProcess, Connection]:
        if self.fail_with is not None:
            raise self.fail_with
        ours, theirs = multiprocessing.Pipe(duplex=True)
        pid = next(self.pids) if self.pids is not None else None
        process = FakeProcess(pid, obeys_sigterm=self.obeys_sigterm)
        self.started.append(FakeWorker(node, process, theirs, inputs))
        self.supervisor_ends.append(ours)
        return process, ours

    def of(self, node: str) -> list[FakeWorker]:
        return [w for w in self.started if w.node == node]


@dataclass
class RecordingStatus:
    """The supervisor's status sink, remembering what it was offered."""

    offered: list[tuple[str, str, TickResult]] = field(default_factory=list)

    def offer(self, profile: str, node: str, result: TickResult, force: bool = False) -> bool:
        self.offered.append((profile, node, result))
        return True

    def flush(self, timeout: float) -> bool:
        return True

    def last(self, node: str) -> TickResult | None:
        mine = [r for _, n, r in self.offered if n == node]
        return mine[-1] if mine else None


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def telemetry(name: str, node_name: str, timeout_s: float = 2.0) -> dict[str, Any]:
    http = {"endpoint": "http://127.0.0.1:1/{node}", "timeoutSeconds": timeout_s}
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "target": {"scope": "node", "nodeName": node_name},
            "sources": {"cpu": {"type": "http", "http": http}},
            "controls": {"cpu": {"type": "http", "http": dict(http, mode="auto")}},
        },
    }


def power(name: str, node_name: str, cap: float) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": node_name, "profile": "eco", "cpu": {"packagePowerCapWatts": cap}},
    }


class Loop:
    """A supervisor wired to stand-ins; ``turn`` runs one turn at a given fake time."""

    def __init__(
        self,
        launcher: FakeLauncher | None = None,
        loop_period_s: float = 0.01,
        write_hold: WriteHold | None = None,
        hardware: HardwarePublisher | None = None,
        spec_confirmed_at: Callable[[float], float | None] | None = None,
        **overrides: Any,
    ) -> None:
        options: dict[str, Any] = {
            "mode": AgentMode.POOL,
            "reconcile_interval_s": 10.0,
            "shutdown_timeout_s": 20.0,
        }
        options.update(overrides)
        self.settings = Settings(**options)
        self.clock = Clock()
        self.launcher = launcher or FakeLauncher()
        self.status = RecordingStatus()
        self.synced = True
        """What the supervisor is told of its caches' first listing."""
        self._dirs = tempfile.TemporaryDirectory(prefix="agentpool-loop-")
        metrics, state = (os.path.join(self._dirs.name, d) for d in ("metrics", "state"))
        os.makedirs(metrics)
        os.makedirs(state)
        self.io = LoopIO()
        cluster = Cluster(ClusterView(self.settings), EventFeed(self.io.wake),
                          lambda: self.synced, spec_confirmed_at)
        self.supervisor = Supervisor(
            self.settings,
            cluster,
            Spawning(self.launcher, NodeFiles(metrics, state)),
            Reporting(SupervisorCollector(ApiCounters()), self.status, hardware=hardware,
                      write_hold=write_hold),
            self.io,
            clock=self.clock,
            loop_period_s=loop_period_s,
        )

    def close(self) -> None:
        self.io.close()
        for worker in self.launcher.started:
            worker.pipe.close()
            worker.process.release()
        for end in self.launcher.supervisor_ends:
            end.close()
        self._dirs.cleanup()

    def __enter__(self) -> Loop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def turn(self, advance: float = 0.01) -> None:
        """Move the clock (at least 0.01 s: one loop period unless the loop was given a
        longer one), turn once."""
        self.clock.advance(max(advance, 0.01))
        self.supervisor.turn()

    def nodes(self, *names: str) -> None:
        self.supervisor.feed(Relisted(Resource.NODES, [node(n, **MANAGED) for n in names]))

    def change(self, resource: Resource, obj: dict[str, Any], kind: str = "MODIFIED") -> None:
        self.supervisor.feed(Change(resource, kind, obj))

    def handle(self, name: str) -> Any:
        return self.supervisor.workers[name]
