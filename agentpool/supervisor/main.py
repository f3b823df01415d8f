"""Wire the supervisor together and run it until SIGTERM/SIGINT: the process entry point.

Order matters: the fork server is started before any thread exists, and the
multiprocess metrics directory is set in the environment before it starts,
because the fork server and every worker inherit both.
"""

from __future__ import annotations

import logging
import multiprocessing.forkserver
import os
import resource
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from prometheus_client import CollectorRegistry

from agentpool.config import AgentMode, Settings
from agentpool.errors import KubeError
from agentpool.kube.api import KubeApi, Resource, load_client
from agentpool.kube.informer import Informer
from agentpool.kube.status import HEARTBEAT_S, StatusWriter
from agentpool.logs import setup_logging
from agentpool.supervisor.collector import FastMultiProcessCollector
from agentpool.supervisor.httpserver import AgentHttpServer
from agentpool.supervisor.scope import ClusterView
from agentpool.supervisor.selfmetrics import ApiCounters, SupervisorCollector
from agentpool.supervisor.supervisor import Supervisor
from agentpool.supervisor.workers import fork_server_context

log = logging.getLogger(__name__)

EXIT_STARTUP = 1


def _raise_fd_limit() -> None:
    # Two descriptors per worker (pipe + sentinel): 1,000 workers outgrow a soft limit of 1024.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def prepare_metrics_dir(configured: str | None) -> tuple[str, bool]:
    """The multiprocess directory, emptied of old ``*.db`` files; True if we created it."""
    if configured:
        path = Path(configured)
        path.mkdir(parents=True, exist_ok=True)
        for old in path.glob("*.db"):
            old.unlink(missing_ok=True)
        return str(path), False
    return tempfile.mkdtemp(prefix="agentpool-metrics-"), True


def run(settings: Settings) -> int:
    setup_logging(settings.log_format, settings.log_level)
    _raise_fd_limit()
    metrics_dir, private = prepare_metrics_dir(settings.multiproc_dir)
    # Kept across supervisor restarts (not wiped): the host values found before our first
    # write, so a restarted agent restores the real originals, not its own throttle.
    state_dir = os.path.join(metrics_dir, "state")
    os.makedirs(state_dir, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    ctx = fork_server_context(["agentpool.supervisor.preload"])
    multiprocessing.forkserver.ensure_running()

    counters = ApiCounters()
    try:
        api = KubeApi(load_client(settings.kubeconfig), on_request=counters.on_request)
    except KubeError as exc:
        print(f"agentpool: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    view = ClusterView(settings)
    collector = SupervisorCollector(counters)
    status = StatusWriter(api, heartbeat_s=HEARTBEAT_S, spread_heartbeats=True)
    supervisor: Supervisor
    informers: list[Informer] = []

    def synced() -> bool:
        return all(i.synced.is_set() for i in informers)

    def ready() -> bool:
        return synced() and all(i.healthy.is_set() for i in informers)

    supervisor = Supervisor(settings, ctx, view, status, collector, metrics_dir, state_dir, synced)
    if settings.mode is AgentMode.DAEMONSET:
        node_selectors: dict[str, str | None] = {
            "label_selector": None,
            "field_selector": f"metadata.name={settings.node_name}",
        }
    else:
        node_selectors = {"label_selector": settings.pool_node_selector, "field_selector": None}
    for resource_kind in Resource:
        selectors = node_selectors if resource_kind is Resource.NODES else {}
        informers.append(
            Informer(
                api,
                resource_kind,
                supervisor.feed,
                watch_timeout_s=settings.watch_timeout_s,
                on_watch_restart=counters.on_watch_restart,
                **selectors,  # type: ignore[arg-type]
            )
        )

    # The workers' series are rendered straight to text (the bulk of a scrape at 1,000
    # workers); the supervisor's own series go through a registry.
    workers_metrics = FastMultiProcessCollector(metrics_dir)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)

    def healthy() -> bool:
        return supervisor.clock() - supervisor.loop_heartbeat < 30.0

    def on_scrape(seconds: float) -> None:
        collector.last_scrape_s = seconds

    try:
        server = AgentHttpServer(
            settings.metrics_host,
            settings.metrics_port,
            registry,
            healthy,
            ready,
            on_scrape,
            render=workers_metrics.render,
        )
    except OSError as exc:
        print(f"agentpool: cannot listen on METRICS_ADDR: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    supervisor.install_signal_handlers()
    server.start()
    collector.start()
    status.start()
    for informer in informers:
        informer.start()
    log.info(
        "agentpool %s mode%s: metrics on http://%s:%d/metrics, reconcile every %gs%s",
        settings.mode.value,
        (
            f" (shard {settings.pool_shard_id} of {max(1, settings.pool_shards)}, "
            f"selector {settings.pool_node_selector!r})"
            if settings.mode is AgentMode.POOL
            else f" (node {settings.node_name})"
        ),
        settings.metrics_host or "0.0.0.0",
        server.port,
        settings.reconcile_interval_s,
        ", SIMULATE-ONLY: nothing will be written" if settings.simulate_only else "",
    )
    try:
        code = supervisor.run()
    finally:
        for informer in informers:
            informer.stop()
        status.stop()
        collector.stop()
        server.stop()
        workers_metrics.close()
        api.close()
        if private:
            shutil.rmtree(metrics_dir, ignore_errors=True)
        # Interpreter shutdown resets Python-level handlers to the default, so a second
        # SIGTERM or Ctrl-C now would kill us with -15 after a clean stop: ignore them.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code
