"""What the supervisor's loop is given, grouped by role: the cluster it follows, how its
workers start and end, and where it reports.

Built once, in dependency order, by :mod:`agentpool.supervisor.main` (or by a test
with stand-ins) and frozen: the loop never swaps a collaborator. Never: does anything
itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from agentpool.kube.nodehardware import HardwarePublisher
from agentpool.kube.writehold import WriteHold
from agentpool.nodeevents.hooks import NodeEvents
from agentpool.supervisor.clusterview import ClusterView
from agentpool.supervisor.deaths import Deaths
from agentpool.supervisor.echoes import EventFeed
from agentpool.supervisor.elastic import ElasticPool
from agentpool.supervisor.handles import Launch
from agentpool.supervisor.memlimit import MemoryBudget
from agentpool.supervisor.selfmetrics import SupervisorCollector
from agentpool.supervisor.statuses import StatusSink
from agentpool.worker.nodefiles import NodeFiles


@dataclass(frozen=True)
class Cluster:
    """What the loop knows of the cluster, and how it hears of changes."""

    view: ClusterView
    """Which nodes this pod owns and what each needs."""
    feed: EventFeed
    """The informers' events, on their way into :attr:`view`."""
    synced: Callable[[], bool]
    """Whether every cache has listed once (API discovery done): no worker starts before."""
    spec_confirmed_at: Callable[[float], float | None] | None = None
    """Given now, when the API last confirmed the desired state (now while its watches
    work; None: nothing to confirm). SPEC_READ_TIMEOUT counts from there."""
    elastic: ElasticPool | None = None
    """Elastic pool membership and handoff; None in a static pool or a daemonset."""


@dataclass(frozen=True)
class Spawning:
    """How workers are started and how their ends are told, and how many may run."""

    launch: Launch
    files: NodeFiles
    """Each node's metrics files and journal."""
    deaths: Deaths = field(default_factory=lambda: Deaths(None))
    """Says how a worker's process ended (an OOM kill, from the pod's cgroup)."""
    max_workers: int | None = None
    """How many workers the descriptor limit allows; owning more nodes is fatal."""
    memory: MemoryBudget = field(default_factory=lambda: MemoryBudget(None))
    """How many workers the pod's memory limit holds; the other owned nodes are refused."""


@dataclass(frozen=True)
class Reporting:
    """Where the supervisor says what its workers do."""

    collector: SupervisorCollector
    """The supervisor's own ``/metrics`` series, from the snapshots the loop publishes."""
    status: StatusSink | None = None
    """Writes TelemetryProfile status (profile API)."""
    twin_status: StatusSink | None = None
    """Writes NodeTwin ``status.controlStatus`` (NodeTwin API)."""
    hardware: HardwarePublisher | None = None
    """Publishes NodeHardware (NodeTwin API, once enabled)."""
    node_events: NodeEvents | None = None
    """Kubernetes Events on the Nodes (docs/metrics.md: Node events); None with EVENTS=false."""
    write_hold: WriteHold | None = None
    """Holds status and NodeHardware writes while workers start (enforce first)."""
