"""Soak: run the real agent for a while under chaos, then check nothing leaked or drifted.

Chaos, each second, chosen at random (seeded): SIGKILL a worker, flap a
node's ``joulie.io/managed`` label, change a profile's cap, inject an API
fault (500s, 429 with Retry-After, 410 on a watch), and now and then an API
outage (emulator stopped for 2 s). Every 5 s it samples the supervisor's
open file descriptors and RSS and the number of files in the multiprocess
directory. Then chaos stops, labels come back, and the run waits for the
agent to converge and checks: every managed node has exactly one worker
(none lost, none duplicated) and every node's final enforced cap (HTTP:
the last control request; host: the PL1 files) equals its final desired cap.

    python bench/soak.py                       # 200 nodes, 10 minutes
    python bench/soak.py --nodes 40 --duration 45 --json out.json

Exit status 1 if any node is lost, duplicated or drifted, or the file count
grew with restarts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from agentpool.sim.agentproc import AgentProcess
from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until
from agentpool.sim.sysfs.trees import SysfsTree, build_nodes, read_int
from agentpool.supervisor.forkclient import SERVER_MODULE

MANAGED = "joulie.io/managed"


@dataclass
class Sample:
    t: float
    fds: int
    rss_mib: float
    metrics_files: int
    workers: int


@dataclass
class Report:
    nodes: int
    duration_s: float
    actions: dict[str, int] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    drifted: list[str] = field(default_factory=list)
    converge_s: float = 0.0

    @property
    def ok(self) -> bool:
        files = [s.metrics_files for s in self.samples]
        bounded = not files or max(files) <= 3 * self.nodes + 3
        return not (self.lost or self.duplicated or self.drifted) and bounded


def limit_is(path: Path, want: int) -> bool:
    """Whether a simulated PL1 file holds ``want``. The agent writes it as the kernel's
    sysfs takes it (truncate, then write), which a plain file in the simulated tree
    shows a reader in between as empty: that is "not yet", not an error."""
    try:
        return read_int(path) == want
    except ValueError:
        return False


def clamped(uw: int, max_file: Path | None) -> int:
    """A package limit as RAPL holds it: at most the zone's maximum, where it has one."""
    return uw if max_file is None else min(uw, read_int(max_file))


def worker_processes(agent: AgentProcess) -> list[psutil.Process]:
    """Workers are the fork server's children; the fork server is the supervisor's child."""
    try:
        supervisor = psutil.Process(agent.pid)
        servers = [c for c in supervisor.children() if SERVER_MODULE in " ".join(c.cmdline())]
    except psutil.Error:
        return []
    workers: list[psutil.Process] = []
    for server in servers:
        try:
            workers.extend(w for w in server.children() if w.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            continue
    return workers


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.names = [f"soak-node-{i}" for i in range(args.nodes)]
        self.host_names = set(self.names[: args.host_nodes])
        self.caps = dict.fromkeys(self.names, 120.0)
        self.unlabelled: dict[str, float] = {}
        self.report = Report(args.nodes, args.duration)
        self.trees: dict[str, SysfsTree] = {}

    def count(self, action: str) -> None:
        self.report.actions[action] = self.report.actions.get(action, 0) + 1

    def run(self) -> Report:
        with SimCluster(seed=self.args.seed) as cluster:
            template = str(cluster.workdir / "sys" / "{node}")
            self.trees = build_nodes(template, sorted(self.host_names))
            for name in self.names:
                cluster.add_node(name, http=name not in self.host_names)
            metrics_dir = cluster.workdir / "metrics"
            agent = cluster.start_agent(
                {
                    "RECONCILE_INTERVAL": "2s",
                    "HEARTBEAT_TIMEOUT": "20s",
                    "WATCH_TIMEOUT": "10s",
                    "SYSFS_ROOT": template,
                    "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
                }
            )
            agent.wait_ready(timeout=120)
            wait_until(lambda: len(agent.worker_pids()) == len(self.names), 180)
            self.chaos(cluster, agent, metrics_dir)
            self.converge(cluster, agent)
            self.sample(agent, metrics_dir, 0.0)
            agent.terminate(timeout=60)
        for tree in self.trees.values():
            tree.close()
        return self.report

    def sample(self, agent: AgentProcess, metrics_dir: Path, t: float) -> None:
        try:
            proc = psutil.Process(agent.pid)
            fds, rss = proc.num_fds(), proc.memory_info().rss / 2**20
        except psutil.Error:
            fds, rss = -1, -1.0
        self.report.samples.append(
            Sample(
                round(t, 1),
                fds,
                round(rss, 1),
                len(list(metrics_dir.glob("*.db"))),
                len(worker_processes(agent)),
            )
        )

    def chaos(self, cluster: SimCluster, agent: AgentProcess, metrics_dir: Path) -> None:
        started = time.monotonic()
        next_sample = 0.0
        next_outage = 60.0
        while (elapsed := time.monotonic() - started) < self.args.duration:
            if elapsed >= next_sample:
                self.sample(agent, metrics_dir, elapsed)
                next_sample += 5.0
            now = time.monotonic()
            for name, due in list(self.unlabelled.items()):
                if now >= due:
                    cluster.set_labels(name, {MANAGED: "true"})
                    del self.unlabelled[name]
            if elapsed >= next_outage:
                cluster.emulator.stop()
                time.sleep(2.0)  # the outage itself: nothing to wait for
                cluster.emulator.start()
                self.count("api_outage")
                next_outage += 60.0
            action = self.rng.choice(["kill", "flap", "profile", "profile", "api_fault"])
            getattr(self, f"do_{action}")(cluster, agent)
            time.sleep(1.0 / self.args.rate)

    def do_kill(self, cluster: SimCluster, agent: AgentProcess) -> None:
        pids = agent.worker_pids()
        if pids:
            node = self.rng.choice(sorted(pids))
            try:
                os.kill(pids[node], signal.SIGKILL)
                self.count("kill_worker")
            except ProcessLookupError:
                pass  # it died or was replaced meanwhile

    def do_flap(self, cluster: SimCluster, agent: AgentProcess) -> None:
        candidates = [n for n in self.names if n not in self.unlabelled]
        node = self.rng.choice(candidates)
        cluster.set_labels(node, {MANAGED: None})
        self.unlabelled[node] = time.monotonic() + self.rng.uniform(2.0, 8.0)
        self.count("flap_label")

    def do_profile(self, cluster: SimCluster, agent: AgentProcess) -> None:
        node = self.rng.choice(self.names)
        cap = float(self.rng.choice(range(80, 201, 10)))
        cluster.set_cap(node, cap, profile=self.rng.choice(["eco", "performance"]))
        self.caps[node] = cap
        self.count("change_profile")

    def do_api_fault(self, cluster: SimCluster, agent: AgentProcess) -> None:
        kind = self.rng.choice(["500", "429", "410"])
        if kind == "500":
            cluster.emulator.inject(
                verb=self.rng.choice(["list", "watch", "patch"]), fault="500", times=3
            )
        elif kind == "429":
            cluster.emulator.inject(
                verb="patch", resource="telemetryprofiles", fault=429, retry_after=1, times=2
            )
        else:
            cluster.emulator.inject(
                verb="watch", resource=self.rng.choice(["nodes", "npp"]), fault="410"
            )
        self.count(f"api_{kind}")

    def converge(self, cluster: SimCluster, agent: AgentProcess) -> None:
        cluster.emulator.clear_faults()
        for name in list(self.unlabelled):
            cluster.set_labels(name, {MANAGED: "true"})
        self.unlabelled.clear()
        settle_started = time.monotonic()

        def enforced(name: str) -> bool:
            if name in self.host_names:
                tree = self.trees[name]
                cap_uw = int(self.caps[name] * 1_000_000)  # each package's limit, clamped
                return all(limit_is(z.pl1.limit_file, clamped(cap_uw, z.pl1.max_file))
                           for z in tree.packages if z.pl1)
            requests = cluster.power.requests(node=name, kind="control")
            caps = [r.body.get("capWatts") for r in requests if isinstance(r.body, dict)]
            return bool(caps) and caps[-1] == self.caps[name]

        def converged() -> bool:
            pids = agent.worker_pids()
            return set(pids) == set(self.names) and all(enforced(n) for n in self.names)

        try:
            wait_until(converged, self.args.settle, interval=0.5)
        except TimeoutError:
            pass  # reported below, node by node
        self.report.converge_s = round(time.monotonic() - settle_started, 1)
        pids = agent.worker_pids()
        self.report.lost = sorted(set(self.names) - set(pids))
        live = worker_processes(agent)
        if len(live) > len(pids):
            self.report.duplicated = [f"{len(live) - len(pids)} extra worker process(es)"]
        self.report.drifted = sorted(n for n in self.names if not enforced(n))


def summary(report: Report) -> str:
    s = report.samples
    lines = [
        f"soak: {report.nodes} nodes, {report.duration_s:g}s of chaos, converged in "
        f"{report.converge_s}s",
        "actions: " + ", ".join(f"{k}={v}" for k, v in sorted(report.actions.items())),
    ]
    if s:
        for label, values in (
            ("supervisor fds", [x.fds for x in s]),
            ("supervisor RSS MiB", [x.rss_mib for x in s]),
            ("multiprocess files", [x.metrics_files for x in s]),
            ("worker processes", [x.workers for x in s]),
        ):
            lines.append(
                f"{label:>20}: first {values[0]}, median {statistics.median(values)}, "
                f"max {max(values)}, last {values[-1]}"
            )
    lines.append(
        f"lost workers: {len(report.lost)}, duplicated: {len(report.duplicated)}, "
        f"nodes whose host state differs from desired: {len(report.drifted)}"
    )
    for label, items in (
        ("lost", report.lost),
        ("dup", report.duplicated),
        ("drift", report.drifted),
    ):
        if items:
            lines.append(f"  {label}: {', '.join(items[:10])}")
    lines.append("RESULT: " + ("ok" if report.ok else "FAILED"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--host-nodes", type=int, default=10, help="nodes on sysfs trees")
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of chaos")
    parser.add_argument("--rate", type=float, default=1.0, help="chaos actions per second")
    parser.add_argument("--settle", type=float, default=90.0, help="max seconds to converge")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    report = Soak(args).run()
    print(summary(report))
    if args.json:
        data: dict[str, Any] = asdict(report)
        data["ok"] = report.ok
        args.json.write_text(json.dumps(data, indent=2))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
