"""Wire the supervisor together and run it until SIGTERM/SIGINT: the process entry point.

Order matters: the fork server is started before any thread exists, and the
multiprocess metrics directory is set in the environment before it starts,
because the fork server and every worker inherit both. The command line does
both before this module's imports (:mod:`~agentpool.supervisor.prelaunch`), so
the server's preload overlaps them. Everything started is
registered on one ``ExitStack`` as it starts, so it is stopped in reverse
order however far start-up got.

A setting that parsed but cannot be used (``PROMETHEUS_MULTIPROC_DIR`` or
``STATE_DIR`` that cannot be made or written, ``METRICS_ADDR`` that cannot be
listened on, ``KUBECONFIG`` that does not load) is a :class:`ConfigError`
naming the variable: it is found before any worker starts or any request is
made, and leaves :func:`run` once everything started is stopped again, so
the CLI exits 2 as for a value that does not parse.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import resource
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from agentpool.backoff import reconnect_cap
from agentpool.config.options import AgentMode
from agentpool.config.settings import Settings
from agentpool.errors import ConfigError, KubeError, StartupError
from agentpool.hardware.catalog import Catalog, load_catalog
from agentpool.kube.api import KubeApi, Resource, load_client
from agentpool.kube.events import EventRecorder
from agentpool.kube.informer import Informer, InformerEvent
from agentpool.kube.leases import LeaseClient, ReplicasWatch
from agentpool.kube.nodehardware import HardwarePublisher
from agentpool.kube.reachability import Reachability
from agentpool.kube.selection import KindDiscovery
from agentpool.kube.status import HEARTBEAT_S, StatusWriter, twin_status_body
from agentpool.kube.writehold import WriteHold
from agentpool.logs import setup_logging
from agentpool.nodeevents.hooks import NodeEvents
from agentpool.pool.fence import grace_for
from agentpool.proctitle import TITLE_PREFIX, enable, set_title
from agentpool.supervisor import memcgroup
from agentpool.supervisor.clusterview import ClusterView
from agentpool.supervisor.collaborators import Cluster, Reporting, Spawning
from agentpool.supervisor.collector import FastMultiProcessCollector
from agentpool.supervisor.deaths import Deaths
from agentpool.supervisor.diskspace import DiskSpace, watched_dirs
from agentpool.supervisor.echoes import EventFeed
from agentpool.supervisor.elastic import ElasticPool
from agentpool.supervisor.eventmetrics import EventMetrics
from agentpool.supervisor.handles import ForkServerLauncher
from agentpool.supervisor.httpserver import AgentHttpServer
from agentpool.supervisor.loop import Supervisor
from agentpool.supervisor.loopio import LoopIO
from agentpool.supervisor.memlimit import MemoryBudget
from agentpool.supervisor.narrowing import (
    BY_NAME_MAX_NODES,
    KindScope,
    by_node,
    kind_scope,
    node_scope,
)
from agentpool.supervisor.nodefamily import NodeFamily, OwnedNodes
from agentpool.supervisor.prelaunch import (
    FDS_PER_NODE,
    RESERVED_FDS,
    Prelaunch,
    prelaunch,
    usable_dir,
)
from agentpool.supervisor.selfmetrics import ApiCounters, SupervisorCollector
from agentpool.supervisor.watches import Watched, Watches
from agentpool.tokenbucket import RateLimiter
from agentpool.worker.nodefiles import NodeFiles

log = logging.getLogger(__name__)

EXIT_STARTUP = 1
LOOP_STALL_S = 30.0
"""``/healthz`` fails when the loop has not turned for this long."""
FRESHNESS_SLACK_S = 30.0
"""A cache is stale once unconfirmed for WATCH_TIMEOUT (a quiet watch ends and reopens
that often) plus this much."""
OPEN_METRICS_FILES_PER_NODE = 3
FORK_SERVER_READY_S = 120.0
"""Its imports, warm-up and heap layout take seconds; the bound leaves room for ten
times that on a loaded 2-core box."""


class _Service(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


def _private_or(configured: str | None, prefix: str, stack: contextlib.ExitStack) -> str:
    """``configured`` (created if missing, never wiped), or a temporary dir removed at exit."""
    if configured:
        usable_dir("STATE_DIR", configured)
        return configured
    path = tempfile.mkdtemp(prefix=prefix)
    stack.callback(shutil.rmtree, path, ignore_errors=True)
    return path


def _informer_factory(
    settings: Settings,
    api: KubeApi,
    feed: Callable[[InformerEvent], None],
    counters: ApiCounters,
    on_error: Callable[[], None],
) -> Callable[[Resource], Watched]:
    """Makes the informer of a kind, narrowed to what this pod controls
    (:mod:`agentpool.supervisor.narrowing`); the NodeTwins and NodeHardwares of a static pool
    of many shards get a family of them, one per owned node while the pod owns few
    (:mod:`agentpool.supervisor.nodefamily`)."""

    def on_watch_restart(resource: str, reason: str) -> None:
        counters.on_watch_restart(resource, reason)
        if reason == "error" and not api.reachability.down:
            on_error()  # the kind's CRD may be gone: discovery looks again

    def informer(
        kind: Resource, sink: Callable[[InformerEvent], None], scope: KindScope,
        watch_timeout_s: float = settings.watch_timeout_s, label: str | None = None,
        family: NodeFamily | None = None,
    ) -> Informer:
        return Informer(
            api,
            kind,
            sink,
            label_selector=scope.label_selector,
            field_selector=scope.field_selector,
            watch_timeout_s=watch_timeout_s,
            on_watch_restart=on_watch_restart,
            max_backoff_s=reconnect_cap(settings.reconcile_interval_s),
            keep=scope.keep,
            wants=scope.wants,
            trim=scope.trim,
            label=label,
            list_gate=family.list_gate if family is not None else None,
            before_first_watch=family.before_first_watch if family is not None else None,
            names_first=scope.names_first,
        )

    owned = OwnedNodes(feed)
    families = any(by_node(settings, kind) for kind in Resource)

    def make(kind: Resource) -> Watched:
        if kind is Resource.NODES and families:
            return informer(kind, owned, kind_scope(settings, kind))
        if not by_node(settings, kind):
            return informer(kind, feed, kind_scope(settings, kind))
        whole = kind_scope(settings, kind)

        def named(node: str, sink: Callable[[InformerEvent], None]) -> Informer:
            # Spread over the last quarter of the timeout: the members of a family start
            # together and would otherwise all reconnect in the same instant, every time.
            spread = settings.watch_timeout_s * (1.0 - random.random() / 4)
            return informer(kind, sink, node_scope(kind, node), spread, f"{kind} of {node}",
                            family)

        family = NodeFamily(kind, feed, named, lambda sink: informer(kind, sink, whole),
                            BY_NAME_MAX_NODES)
        owned.add(family)
        return family

    return make


class _Readiness:
    """``/readyz``: the setting works with the kinds served, and every cache of a served kind
    is listed and confirmed fresh within the bound. Ready, its body also says what the agent
    goes without (kinds or Events RBAC keeps it from), which never makes it unready."""

    def __init__(
        self,
        watches: Watches,
        discovery: KindDiscovery,
        bound_s: float,
        reachability: Reachability | None = None,
        recorder: EventRecorder | None = None,
    ) -> None:
        self.watches = watches
        self.discovery = discovery
        self.bound_s = bound_s
        self.reachability = reachability
        self.recorder = recorder
        self._first_sync_logged = False
        self.final: tuple[bool, str] | None = None
        """The answer from the moment the agent stops its own caches until it exits: they
        go stale because it stops them, which is no news to the kubelet probing it."""

    def informers(self) -> list[Informer]:
        """The informers that count: nodes, and the kinds discovery last found served (one
        whose CRD just went away fails until discovery confirms it gone and stops it)."""
        served = self.discovery.served
        return [
            i for i in self.watches.informers()
            if i.resource is Resource.NODES or i.resource in served
        ]

    def waiting_for(self) -> str | None:
        """Why the setting cannot work yet (API discovery); None once it can."""
        return self.discovery.problem

    def synced(self) -> bool:
        informers = self.informers()
        done = (
            bool(informers)
            and self.waiting_for() is None
            and all(i.synced.is_set() for i in informers)
        )
        if done and not self._first_sync_logged:
            self._first_sync_logged = True
            started = seconds_since_start()
            since = f" {started:.2f}s after the process started" if started is not None else ""
            log.info("caches synced%s: ready", since)
        return done

    def __call__(self) -> tuple[bool, str]:
        if self.final is not None:
            return self.final
        now = time.monotonic()
        problems = []
        reach = self.reachability
        outage = reach.outage() if reach is not None else None
        if reach is not None and outage is not None:
            problems.append(
                f"Kubernetes API at {reach.server} unreachable for {now - outage.since:.0f}s "
                f"({outage.error}); caches kept as last listed"
            )
        waiting = self.waiting_for()
        if waiting is not None:
            return False, "not ready: " + "; ".join([*problems, waiting])
        for informer in self.informers():
            age, error = informer.staleness(now)
            if not informer.synced.is_set():
                problems.append(f"{informer.resource}: not listed yet ({error or 'listing'})")
            elif outage is not None and (error is not None or age > self.bound_s):
                problems.append(f"{informer.resource}: not confirmed for {age:.0f}s")
            elif error is not None or age > self.bound_s:
                problems.append(
                    f"{informer.resource}: not confirmed for {age:.0f}s "
                    f"(bound {self.bound_s:.0f}s); last error: {error or informer.last_error}"
                )
        if problems:
            return False, "not ready: " + "; ".join(problems)
        notes = [self.discovery.note, self.recorder.refused if self.recorder else None]
        return True, "; ".join(["ok", *(n for n in notes if n)])


def seconds_since_start() -> float | None:
    """How long ago this process was created (``/proc/self/stat``), None where unknown.

    Measured against the boot-time clock, as the kernel counts a process's start, so it
    includes the interpreter's own start-up and every import before this is called.
    """
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, after pid and comm
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def run(
    settings: Settings, listener: socket.socket | None = None, early: Prelaunch | None = None
) -> int:
    """The agent until it stops; its exit status.

    ``listener`` is the metrics socket when the caller opened it already
    (``httpserver.listen``, so that probes are queued, not refused, meanwhile). Such a
    caller is the process's entry point and exits as soon as this returns: the server
    is then left answering, because the kubelet probes a container until it has exited
    and closing the socket any earlier fails those probes.

    ``early`` is what :func:`~agentpool.supervisor.prelaunch.prelaunch` launched before
    this module's imports (the command line does); without it, it is done here.
    """
    setup_logging(settings.log_format, settings.log_level)
    for note in settings.notes:
        log.warning("configuration: %s", note)
    try:
        with contextlib.ExitStack() as stack:
            return _run(settings, stack, listener, early)
    except StartupError as exc:
        print(f"agentpool: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    finally:
        # Interpreter shutdown resets Python-level handlers to the default, so a second
        # SIGTERM or Ctrl-C now would kill us with -15 after a clean stop: ignore them.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def supervisor_title(settings: Settings) -> str:
    """What ``ps`` shows for the supervisor: its mode and shard, pod or node."""
    if settings.mode is AgentMode.DAEMONSET:
        return f"{TITLE_PREFIX}supervisor (daemonset, node {settings.node_name})"
    if settings.elastic.lease:
        return f"{TITLE_PREFIX}supervisor (pool, lease member {settings.pod_name})"
    shards = max(1, settings.pool_shards)
    return f"{TITLE_PREFIX}supervisor (pool, shard {settings.pool_shard_id} of {shards})"


def _run(
    settings: Settings,
    stack: contextlib.ExitStack,
    listener: socket.socket | None,
    early: Prelaunch | None,
) -> int:
    # Before any thread starts, so that the threads' names (top -H) say agentpool too.
    enable(settings.diagnostics.proctitle)
    set_title(supervisor_title(settings), "agentpool")
    if early is None:
        early = prelaunch(settings.multiproc_dir, settings.diagnostics)
    metrics_dir, fork_server = early.metrics_dir, early.fork_server
    if early.private_metrics:
        stack.callback(shutil.rmtree, metrics_dir, ignore_errors=True)
    # The metrics server is stopped after everything but the directories (or not at all,
    # see run): the kubelet probes a pod until its container exits.
    serving = stack.enter_context(contextlib.ExitStack())
    stack.callback(fork_server.stop)  # after everything registered later
    capacity = early.capacity
    if capacity < 1:
        raise StartupError(
            f"RLIMIT_NOFILE ({resource.getrlimit(resource.RLIMIT_NOFILE)[1]}) leaves no "
            f"descriptors for a worker: at least {RESERVED_FDS + FDS_PER_NODE} are needed, "
            f"and {FDS_PER_NODE} more per node"
        )
    files = NodeFiles(metrics_dir, _private_or(settings.state_dir, "agentpool-state-", stack))

    counters = ApiCounters()
    try:
        limit = settings.api_limit
        api = KubeApi(
            load_client(settings.kubeconfig), on_request=counters.on_request,
            namespace=settings.elastic.namespace,
            limiter=RateLimiter(*limit) if limit is not None else None,
        )
    except KubeError as exc:
        if settings.kubeconfig:
            raise ConfigError(
                "KUBECONFIG", settings.kubeconfig, f"expected a kubeconfig file that loads ({exc})"
            ) from None
        raise StartupError(str(exc)) from exc  # in-cluster: no variable was set to blame
    stack.callback(api.close)
    collector = SupervisorCollector(counters)
    hold = WriteHold()  # enforce first: these writes wait while workers start
    reconnect_s = reconnect_cap(settings.reconcile_interval_s)
    status = StatusWriter(api, heartbeat_s=HEARTBEAT_S, spread_heartbeats=True, hold=hold,
                          max_backoff_s=reconnect_s)
    twin_status = StatusWriter(
        api,
        heartbeat_s=HEARTBEAT_S,
        max_backoff_s=reconnect_s,
        spread_heartbeats=True,
        resource=Resource.NODE_TWINS,
        body=twin_status_body,
        hold=hold,
    )
    catalog = _catalog(settings)
    hardware = HardwarePublisher(api, hold=hold, catalog=catalog)
    view = ClusterView(settings, catalog)
    cgroup = memcgroup.find()
    memory = MemoryBudget(cgroup.limit_bytes() if cgroup is not None else None)
    io = stack.enter_context(contextlib.closing(LoopIO()))  # closed once the threads stopped
    feed = EventFeed(io.wake)
    elastic, replicas_watch = _elastic_pool(settings, api, io.wake)
    recorder, node_events = None, None
    if settings.events:
        # In a pod the hostname is the pod's name: a daemonset pod without POD_NAME still says.
        recorder = EventRecorder(api, settings.pod_name or socket.gethostname())
        restores = settings.restore_on_exit and not settings.simulate_only
        node_events = NodeEvents(recorder, restores)

    def on_watched(kind: Resource, watched: bool) -> None:
        if kind is Resource.NODE_HARDWARES:
            # Simulate-only mode too: Joulie's agent publishes before its simulate-only
            # check, and its scheduler and tests wait for it (nothing of a host is written).
            hardware.enabled = watched

    rediscover = threading.Event()  # a watch failed: its kind's CRD may be gone
    make = _informer_factory(settings, api, feed, counters, rediscover.set)
    watches = Watches(make, feed, on_watched)
    discovery = KindDiscovery(api, settings.joulie_api, watches.add, watches.remove,
                              wake=rediscover)
    readiness = _Readiness(
        watches, discovery, settings.watch_timeout_s + FRESHNESS_SLACK_S, api.reachability,
        recorder,
    )
    desired = (Resource.NODE_TWINS, Resource.NODE_POWER_PROFILES)

    def spec_confirmed_at(now: float) -> float | None:
        # Before a desired-state kind is watched there is no desired state to go stale. A
        # watch counts as working until it fails; one that went silent fails at its read
        # deadline, and the desired state was then last confirmed by its last byte.
        seen = [now if i.healthy.is_set() else i.confirmed_at()
                for i in readiness.informers() if i.resource in desired]
        return min(seen, default=None)

    supervisor = Supervisor(
        settings,
        Cluster(view, feed, readiness.synced, spec_confirmed_at, elastic),
        Spawning(ForkServerLauncher(fork_server, settings.worker(), files), files,
                 Deaths(cgroup), max_workers=capacity, memory=memory),
        Reporting(collector, status, twin_status, hardware, node_events, write_hold=hold),
        io,
    )
    disk_space = DiskSpace(watched_dirs(metrics_dir, files.state_dir))
    extra: list[Collector] = [disk_space]
    if recorder is not None:
        extra.append(EventMetrics(recorder.counts))
    server = _http_server(settings, supervisor, collector, readiness, metrics_dir, capacity,
                          serving, elastic, listener, extra)
    supervisor.install_signal_handlers()
    stack.callback(watches.stop_all)
    watches.add(Resource.NODES)
    server.start()
    if listener is None:
        serving.callback(server.stop)
    services: list[_Service] = [collector, disk_space, status, twin_status, hardware, discovery]
    if recorder is not None:
        services.append(recorder)  # stopped before the API client: it writes what it can
    if elastic is not None and replicas_watch is not None:
        services += [elastic, replicas_watch]
    for component in services:
        component.start()
        stack.callback(component.stop)
    _log_start(settings, server.port, capacity, memory)
    if not fork_server.wait_ready(FORK_SERVER_READY_S):
        raise StartupError(f"the fork server did not get ready within {FORK_SERVER_READY_S:g}s")
    code = supervisor.run()
    readiness.final = readiness()
    if elastic is not None:
        # After a clean stop every worker is gone: releasing lets the others take over now.
        elastic.release_on_stop = code == 0
    return code


def _catalog(settings: Settings) -> Catalog | None:
    """The hardware catalog, if one is set and usable. One that is not is said once and
    done without (Joulie's agent, too, runs on without it): it names models, it caps
    nothing."""
    if settings.hardware_catalog_path is None:
        return None
    try:
        catalog = load_catalog(settings.hardware_catalog_path)
    except ConfigError as exc:
        log.warning("%s; NodeHardware carries no catalog keys, and GPU ranges come from "
                    "what is measured, else agentpool's own table of data sheets", exc)
        return None
    log.info("hardware catalog %s (version %s) loaded", settings.hardware_catalog_path,
             catalog.version)
    return catalog


def _elastic_pool(
    settings: Settings, api: KubeApi, wake: Callable[[], None]
) -> tuple[ElasticPool | None, ReplicasWatch | None]:
    """Lease membership's pieces (docs/modes.md: elastic pool), or (None, None) when static;
    ``wake`` turns the loop when a lease result is in."""
    elastic = settings.elastic
    if settings.mode is not AgentMode.POOL or not elastic.lease:
        return None, None
    assert settings.pod_name is not None  # validated with lease membership
    assert elastic.statefulset is not None
    grace = grace_for(settings.shutdown_timeout_s)
    leases = LeaseClient(api, settings.pod_name, elastic.statefulset, elastic.lease_duration_s,
                         grace)
    pool = ElasticPool(elastic, leases, grace, settings.shutdown_timeout_s, wake=wake)
    watch = ReplicasWatch(api, elastic.statefulset, pool.replicas, settings.watch_timeout_s)
    return pool, watch


def _http_server(
    settings: Settings,
    supervisor: Supervisor,
    collector: SupervisorCollector,
    readiness: _Readiness,
    metrics_dir: str,
    capacity: int,
    stack: contextlib.ExitStack,
    elastic: ElasticPool | None = None,
    listener: socket.socket | None = None,
    extra: Iterable[Collector] = (),
) -> AgentHttpServer:
    # The workers' series are rendered straight to text (the bulk of a scrape at 1,000
    # workers); the supervisor's own series go through a registry.
    max_open = min(capacity, 1 << 20) * OPEN_METRICS_FILES_PER_NODE
    workers_metrics = FastMultiProcessCollector(metrics_dir, max_open=max_open)
    stack.callback(workers_metrics.close)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    if elastic is not None:
        registry.register(elastic)  # a collector: its collect() gives agentpool_pool_*
    for more in extra:
        registry.register(more)

    def healthy() -> bool:
        return supervisor.clock() - supervisor.loop_heartbeat < LOOP_STALL_S

    def on_scrape(seconds: float) -> None:
        collector.last_scrape_s = seconds

    try:
        return AgentHttpServer(
            settings.metrics_host,
            settings.metrics_port,
            registry,
            healthy,
            readiness,
            on_scrape,
            render=workers_metrics.render,
            listener=listener,
        )
    except (OSError, UnicodeError) as exc:  # in use, not an address of this host, no name
        host = settings.metrics_host
        where = f"[{host}]" if ":" in host else host
        raise ConfigError(
            "METRICS_ADDR", f"{where}:{settings.metrics_port}",
            f"expected an address this host can listen on ({exc})",
        ) from None


def _log_start(settings: Settings, port: int, capacity: int, memory: MemoryBudget) -> None:
    if settings.mode is AgentMode.POOL:
        where = (
            f" (shard {settings.pool_shard_id} of {max(1, settings.pool_shards)}, "
            f"selector {settings.pool_node_selector!r})"
        )
    else:
        where = f" (node {settings.node_name})"
    log.info(
        "agentpool %s mode%s: metrics on http://%s:%d/metrics, reconcile every %gs, "
        "room for %s nodes (descriptors), %s%s",
        settings.mode.value,
        where,
        settings.metrics_host or "0.0.0.0",
        port,
        settings.reconcile_interval_s,
        capacity if capacity < sys.maxsize else "unlimited",
        memory.describe(),
        ", SIMULATE-ONLY: nothing will be written" if settings.simulate_only else "",
    )
