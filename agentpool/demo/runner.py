"""Run the demo: build the cluster, start the shard agents, watch, act, stop.

Owns the main loop and the exit status. Signal handlers only put the signal
on a queue; the loop's wait on that queue is also its tick, so Ctrl-C is
acted on within one poll and shutdown always goes through the same path:
SIGTERM to every agent, wait for them, report how each exited.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TextIO

from agentpool.demo.observe import Snapshot, observe
from agentpool.demo.scenario import (
    UNMANAGED_COUNT,
    Workload,
    agent_env,
    plan_nodes,
    seed_cluster,
)
from agentpool.demo.timeline import CapWatcher, Moment, Phase, World, advance, script
from agentpool.demo.view import Header, ShardInfo, View, make_view
from agentpool.durations import format_duration
from agentpool.sim.agentproc import AgentProcess
from agentpool.sim.cluster import SimCluster
from agentpool.sim.envtest import EnvtestServer

POLL_S = 0.5
"""How often the cluster is observed; the TTY view redraws every second."""
WORKLOAD_EVERY_S = 6.0
CONFIRM_GRACE_S = 20.0
"""After --duration, how long to wait for confirmations still pending (slow CI boxes)."""
STOP_TIMEOUT_S = 20.0
"""Per agent: SIGTERM, then SIGKILL after this long (its own SHUTDOWN_TIMEOUT is 10 s)."""
LOG_TAIL_LINES = 30


@dataclass(frozen=True)
class DemoOptions:
    nodes: int = 20
    """Managed KWOK-style nodes (plus a couple of unmanaged ones)."""
    shards: int = 2
    """Pool shards, one agent process each."""
    duration_s: float | None = None
    """Stop on our own after this long; None runs until Ctrl-C."""
    interval_s: float = 2.0
    """RECONCILE_INTERVAL of the agents."""
    seed: int = 0
    """Seeds node loads and telemetry noise."""
    workdir: Path | None = None
    """Keep kubeconfig and agent logs here; None: a temporary directory."""
    apiserver: str = "emulator"
    """``emulator``, or ``envtest``: a real kube-apiserver from KUBEBUILDER_ASSETS."""
    api: str = "profiles"
    """``profiles`` (NodePowerProfile + TelemetryProfile) or ``nodetwin`` (NodeTwin with
    percent caps, NodeHardware, routing by environment): the cluster serves only that one."""


class _Run:
    """State of one demo run, so the loop's pieces stay small."""

    def __init__(self, opts: DemoOptions) -> None:
        self.opts = opts
        self.plans = plan_nodes(opts.nodes, opts.seed)
        self.nodes = [plan.name for plan in self.plans]
        self.moments: list[Moment] = script(self.plans, opts.duration_s)
        self.caps = CapWatcher(self.plans)
        self.failures: list[str] = []
        self.last: Snapshot | None = None
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def loop(
        self,
        cluster: SimCluster,
        agents: list[AgentProcess],
        view: View,
        signals: queue.SimpleQueue[int],
    ) -> str:
        """Observe and act until a signal, the duration, or a dead agent; returns why it ended."""
        world = World(cluster, agents)
        workload = Workload(cluster, self.plans, self.opts.seed)
        next_drift = WORKLOAD_EVERY_S
        duration = self.opts.duration_s
        overtime_noted = False
        while True:
            try:
                signum = signals.get(timeout=POLL_S)
                return f"received {signal.Signals(signum).name}"
            except queue.Empty:
                pass
            for shard, agent in enumerate(agents):
                if agent.process.poll() is not None:
                    self.failures.append(
                        f"shard {shard} agent exited with status {agent.process.returncode}"
                    )
            if self.failures:
                return "an agent died"
            snap = observe(cluster, agents, self.nodes, self.elapsed())
            self.last = snap
            for line in self.caps.update(snap):
                view.event(snap.at, line)
            for line in advance(self.moments, world, snap, self.caps.all_applied):
                view.event(snap.at, line)
            view.tick(snap)
            if snap.at >= next_drift:
                workload.step()
                next_drift += WORKLOAD_EVERY_S
            if duration is not None and snap.at >= duration:
                if not self.pending():
                    return f"--duration {duration:g}s reached"
                if snap.at >= duration + CONFIRM_GRACE_S:
                    return f"--duration {duration:g}s reached (plus {CONFIRM_GRACE_S:g}s grace)"
                if not overtime_noted:
                    overtime_noted = True
                    view.event(
                        snap.at,
                        f"--duration reached; waiting up to {CONFIRM_GRACE_S:g}s "
                        f"for: {', '.join(self.pending())}",
                    )

    def pending(self) -> list[str]:
        """What has not been seen to work yet."""
        waiting = [f"cap on {node}" for node in self.caps.pending]
        waiting += [m.title for m in self.moments if m.phase is not Phase.CONFIRMED]
        return waiting

    def summary(self, interrupted: bool) -> list[str]:
        confirmed = [m for m in self.moments if m.phase is Phase.CONFIRMED]
        lines = [
            f"caps applied on {self.caps.total - len(self.caps.pending)}/{self.caps.total} "
            "managed nodes",
            f"timeline: {len(confirmed)}/{len(self.moments)} moments confirmed",
        ]
        marks = {
            Phase.CONFIRMED: "ok           ",
            Phase.PERFORMED: "NOT CONFIRMED",
            Phase.WAITING: "not reached  ",
        }
        lines += [f"  {marks[m.phase]} {m.title}" for m in self.moments]
        # Ctrl-C before the script ran is the user's choice; with --duration
        # everything must have been seen to work.
        if not interrupted and self.pending():
            self.failures.append(f"not confirmed: {', '.join(self.pending())}")
        return lines


def _stop_agents(agents: list[AgentProcess], view: View) -> list[int]:
    """SIGTERM each agent exactly once (all at once, so they stop in parallel), then wait.

    Exactly once: as in Kubernetes, a second SIGTERM is not part of the
    contract, and the supervisor may already have restored default handlers.
    """
    began = time.monotonic()
    for agent in agents:
        if agent.process.poll() is None:
            agent.process.send_signal(signal.SIGTERM)
    codes = []
    for shard, agent in enumerate(agents):
        try:
            agent.process.wait(max(0.1, began + STOP_TIMEOUT_S - time.monotonic()))
        except subprocess.TimeoutExpired:
            view.message(f"shard {shard} agent did not stop within {STOP_TIMEOUT_S:g}s: SIGKILL")
            agent.process.kill()
            agent.process.wait()
        code = agent.terminate()  # only closes its log now: the process has exited
        codes.append(code)
        view.message(
            f"shard {shard} agent (pid {agent.pid}) exited with status {code} "
            f"after {time.monotonic() - began:.1f}s"
        )
    return codes


def _log_tail(agent: AgentProcess) -> str:
    # Read the file itself: the agent's handle on it is closed once it stopped.
    lines = agent.log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    return "\n".join("    " + line for line in lines)


def _run(opts: DemoOptions, signals: queue.SimpleQueue[int], out: TextIO) -> int:
    run = _Run(opts)
    if opts.workdir is not None:
        opts.workdir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(EnvtestServer()) if opts.apiserver == "envtest" else None
        cluster = stack.enter_context(
            SimCluster(workdir=opts.workdir, seed=opts.seed, server=server, api=opts.api)
        )
        return _show(run, cluster, signals, out)


def _show(run: _Run, cluster: SimCluster, signals: queue.SimpleQueue[int], out: TextIO) -> int:
    opts = run.opts
    seed_cluster(cluster, run.plans)
    routing = cluster.routing_env() if cluster.nodetwin else None
    agents = [
        cluster.start_agent(
            env=agent_env(i, opts.shards, opts.interval_s, routing), name=f"shard-{i}"
        )
        for i in range(opts.shards)
    ]
    header = Header(
        nodes=opts.nodes,
        unmanaged=UNMANAGED_COUNT,
        interval=format_duration(opts.interval_s),
        api_url=cluster.api_url,
        kubeconfig=str(cluster.kubeconfig),
        power_url=cluster.power.url,
        shards=[ShardInfo(i, a.pid, a.metrics_url) for i, a in enumerate(agents)],
    )
    view = make_view(header, out)
    reason = "stopped"
    try:
        reason = run.loop(cluster, agents, view, signals)
    finally:
        view.close(run.last)
        view.message(f"stopping ({reason}): SIGTERM to {len(agents)} shard agents")
        codes = _stop_agents(agents, view)
    interrupted = reason.startswith("received")
    for line in run.summary(interrupted):
        view.message(line)
    for shard, code in enumerate(codes):
        failure = f"shard {shard} agent exited with status {code}"
        if code != 0 and failure not in run.failures:
            run.failures.append(failure)
    if run.failures:
        for failure in run.failures:
            view.message(f"FAILED: {failure}")
        for shard, agent in enumerate(agents):
            view.message(f"last lines of shard {shard}'s log ({agent.log_path}):")
            view.message(_log_tail(agent))
        return 1
    view.message("demo finished cleanly")
    return 0


def run_demo(opts: DemoOptions, out: TextIO = sys.stdout) -> int:
    """Run the demo; returns the process exit status (0 = everything seen to work)."""
    signals: queue.SimpleQueue[int] = queue.SimpleQueue()

    def record(signum: int, frame: FrameType | None) -> None:
        # SimpleQueue.put is reentrant: safe even if the signal interrupts a get().
        signals.put(signum)

    previous = {sig: signal.signal(sig, record) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _run(opts, signals, out)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
