"""Close to the floor: start-up, CPU per node-tick and worker memory, each next to its floor.

One run, one pool pod (one shard) over N simulated nodes (HTTP controls at
the power simulator, or host controls on per-node sysfs trees), measured
from outside as an operator would, each number next to what a process
cannot go below, measured in the same run on the same (shared, loaded)
machine:

1. **CPU floor**: before the agent starts, a bare loop in one process
   (``bench/floor_loop.py``) makes the requests the agent's ticks make, for
   every node at the reconcile interval: HTTP, one control POST per node and
   tick (the same JSON, a kept-alive connection per origin on the agent's own
   wire code, :mod:`agentpool.backends.http11`, the answer parsed); host, the
   package zones' energy counters read and the cap written. Its CPU time
   (user + system) per node-tick is the floor. Next to it, what a process
   pays only to sleep the interval (at most 2 s) and wake up again, which a
   worker does at least twice a tick (its timer, its answer) and the bare
   loop, its requests back to back, does not: on a VM whose idle vCPU halts,
   that wake-up is not the few microseconds it is on bare metal.
2. **Start-up**: from launching ``python -m agentpool`` (imports included)
   to every node's cap applied: its first control request at the simulator
   (HTTP) or the PL1 limit file of every package zone holding the cap
   (host).
3. **CPU per node-tick**: user + system time of every process of the agent
   (supervisor, fork server, helpers, workers) over a steady window, which
   begins after ``--settle`` once the API is quiet (the start-up's NodeHardware
   writes are budget-paced: ~20 s at N = 1,000), divided by the ticks in it
   (``agentpool_reconcile_duration_seconds_count``, summed over the workers,
   from ``/metrics`` before and after). The supervisor's part is broken down
   by thread (the agent names its threads in the kernel: ``/proc/<pid>/task/
   <tid>/comm`` and ``schedstat``), which is where a tick's time goes on the
   supervisor's side, in every run. The start-up records a Node event per
   node, written at the pod's event budget (about one a second, ~15 minutes
   at N = 1,000): the report says how many were still to write as the window
   began, and ``--drain-events`` begins the window only once they are written.
4. **Worker memory** at each checkpoint (minutes after the agent started):
   median and p95 PSS of the N workers, next to the median PSS of
   ``--floor-workers`` extra workers forked by the same fork server, last
   (their nodes sort last), that only sleep (the ``idle`` fault of
   :mod:`agentpool.sim.workerfaults`);
   growth between the last two checkpoints.

Workers' metrics files are kept in ``/dev/shm`` where there is one, as the
chart keeps them in memory (an ``emptyDir`` with ``medium: Memory``); on
this machine's ext4 ``/tmp``, 1,000 workers creating theirs at start-up
queued on the inode allocator. ``HEARTBEAT_TIMEOUT`` is raised to an hour
(``--heartbeat-timeout``) so the sleeping workers are not killed as silent
(no worker of this run hangs). That also makes the silence fences an hour
long, renewed every half hour instead of about every half heartbeat limit as
with the default: ``--heartbeat-timeout ''`` runs the agent as deployed, without
sleeping workers (``--floor-workers 0``), for the CPU and start-up rows.
Prints markdown and, with ``--output``, replaces its section of BENCHMARKS.md
(between markers); asserts nothing.

    .venv-py312/bin/python bench/floor.py --nodes 1000 --backend http --minutes 10,20
    .venv-py312/bin/python bench/floor.py --nodes 50 --minutes 1 --cpu-window 20 --output -
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from measure import (
    MIB,
    cpu_delta,
    cpu_seconds,
    machine,
    median,
    memory,
    percentile,
    process_tree,
    wait_for_quiet_api,
)
from prometheus_client.parser import text_string_to_metric_families
from report import replace_section

from agentpool.sim import workerfaults
from agentpool.sim.agentproc import AgentProcess, worker_pids
from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until
from agentpool.sim.sysfs.trees import SysfsTree, build_nodes, intel_2socket

ROOT = Path(__file__).resolve().parents[1]
SHM = Path("/dev/shm")
CAP_W = 120.0
"""The cap every node's NodePowerProfile asks for (the simulation kit's default)."""


@dataclass
class Result:
    backend: str
    nodes: int
    interval_s: float
    load: list[float] = field(default_factory=list)
    floor_ms: float = 0.0
    """CPU per node-tick of the bare loop."""
    wake_ms: float = 0.0
    """CPU of one process's sleep and wake-up at the interval (at most WAKE_SLEEP_S)."""
    startup_s: float = 0.0
    agent_ms: float = 0.0
    ticks: float = 0.0
    quiet_s: float = 0.0
    """How long after the settle the API took to quiet down (the start-up's writes)."""
    cpu_by_role: dict[str, float] = field(default_factory=dict)
    """ms per node-tick by process role."""
    cpu_by_thread: dict[str, float] = field(default_factory=dict)
    """ms per node-tick of each of the supervisor's threads, by name (``status_*``: the
    status writer's pool together)."""
    events_pending: float | None = None
    """Node events the agent still had to write as the window began (the start-up's, paced
    at about one a second): their writing is in the window."""
    drain_s: float | None = None
    """How long ``--drain-events`` waited for them."""
    loop_wakes_per_s: float = 0.0
    """How often the supervisor's main loop went to sleep and woke in the window (its
    thread's voluntary context switches): the turns that were not busy back to back."""
    api_per_node_min: float = 0.0
    """Kubernetes API requests of the agent in the window, per node and minute."""
    points: list[tuple[float, float, float, float]] = field(default_factory=list)
    """(minute, median PSS, p95 PSS, floor median PSS) in bytes."""


def floor_cpu(args: argparse.Namespace, cluster: SimCluster, names: list[str],
              trees: dict[str, SysfsTree]) -> float:
    cmd = [sys.executable, str(Path(__file__).with_name("floor_loop.py")),
           "--interval", str(args.interval), "--seconds", str(args.cpu_window),
           "--cap", str(CAP_W)]
    if args.backend == "http":
        cmd += ["--endpoint", cluster.power.control_endpoint]
    else:
        for tree in trees.values():
            for zone in tree.packages:
                assert zone.pl1 is not None
                cmd += ["--zone", f"{zone.energy_file}={zone.pl1.limit_file}"]
    out = subprocess.run(cmd, input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout
    cpu_s, ticks = (float(x) for x in out.split())
    return 1000 * cpu_s / ticks


WAKE_SLEEP_S = 2.0
"""The longest sleep the wake-up floor is measured with (a longer one reads the same)."""
WAKE_PROBE = """
import select, sys, time
sleep_ms, count = int(sys.argv[1]), int(sys.argv[2])
poller = select.poll()
poller.poll(sleep_ms)
start = time.process_time()
for _ in range(count):
    poller.poll(sleep_ms)
print((time.process_time() - start) / count)
"""


def wake_cpu(interval: float, count: int) -> float:
    """ms of CPU a process pays to sleep (as a worker between ticks) and wake up, nothing
    else: the part of a tick the one-process-per-node design cannot avoid, which the bare
    loop (one process, its requests back to back) does not pay."""
    sleep_ms = round(1000 * min(interval, WAKE_SLEEP_S))
    out = subprocess.run([sys.executable, "-c", WAKE_PROBE, str(sleep_ms), str(count)],
                         capture_output=True, text=True, check=True).stdout
    return 1000 * float(out)


def applied(args: argparse.Namespace, cluster: SimCluster, names: list[str],
            trees: dict[str, SysfsTree], since: float) -> bool:
    if args.backend == "http":
        return len(set(cluster.controlled_nodes(since))) >= len(names)
    want = int(CAP_W * 1e6)  # each package zone's limit (under the trees' 165 W maximum)
    for tree in trees.values():
        for zone in tree.packages:
            assert zone.pl1 is not None
            # The agent may be between truncating and writing the file: empty, not yet.
            if zone.pl1.limit_file.read_text().strip() != str(want):
                return False
    return True


def scrape(agent: AgentProcess) -> str:
    # A generous timeout: on a shared, loaded machine a scrape of 1,000 workers' files can
    # take longer than AgentProcess's default.
    return agent.get("/metrics", timeout=120.0)[1]


def ticks_so_far(agent: AgentProcess) -> float:
    for family in text_string_to_metric_families(scrape(agent)):
        if family.name == "agentpool_reconcile_duration_seconds":
            return sum(s.value for s in family.samples if s.name.endswith("_count"))
    return 0.0


def metric_value(agent: AgentProcess, name: str) -> float | None:
    for family in text_string_to_metric_families(scrape(agent)):
        if family.name == name:
            return sum(s.value for s in family.samples)
    return None


def drain_events(agent: AgentProcess, timeout_s: float) -> float:
    """Wait until the agent has written every Node event it had to (the start-up records
    one per node, written at the pod's budget of about one a second: ~15 minutes at
    N = 1,000); the seconds waited. An agent without the series records none
    (``EVENTS=false``): nothing to wait for."""
    start = time.monotonic()
    wait_until(lambda: not metric_value(agent, "agentpool_events_pending"), timeout_s,
               interval=5.0)
    return time.monotonic() - start


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Each thread of ``pid``: its name (the agent names its threads) and its CPU seconds
    (``schedstat``'s nanoseconds on a CPU; ``stat``'s clock ticks are 10 ms)."""
    threads: dict[int, tuple[str, float]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().rstrip("\n")
            on_cpu = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        threads[int(tid)] = (name, on_cpu / 1e9)
    return threads


def by_thread_name(before: dict[int, tuple[str, float]],
                   after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds between the two readings, summed by thread name (a pool's numbered
    threads together; a thread started in between counted from zero)."""
    spent: dict[str, float] = {}
    for tid, (name, cpu) in after.items():
        key = name.rstrip("0123456789") + "*" if name[-1:].isdigit() else name
        spent[key] = spent.get(key, 0.0) + cpu - before.get(tid, (name, 0.0))[1]
    return spent


def voluntary_switches(pid: int) -> int:
    """The main thread's voluntary context switches (``/proc/<pid>/task/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/task/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def steady_cpu(agent: AgentProcess, window: float, result: Result) -> None:
    tree = process_tree(agent.pid)
    roles = {tree.supervisor.pid: "supervisor"}
    if tree.fork_server is not None:
        roles[tree.fork_server.pid] = "fork server"
    roles.update({p.pid: "helpers" for p in tree.helpers})
    procs = tree.all()
    result.events_pending = metric_value(agent, "agentpool_events_pending")
    api_before = metric_value(agent, "agentpool_api_requests") or 0.0
    t0, before = ticks_so_far(agent), cpu_seconds(procs)
    threads_before = thread_cpu(tree.supervisor.pid)
    wakes_before = voluntary_switches(tree.supervisor.pid)
    time.sleep(window)
    wakes_after = voluntary_switches(tree.supervisor.pid)
    threads_after = thread_cpu(tree.supervisor.pid)
    after, t1 = cpu_seconds(procs), ticks_so_far(agent)
    api_after = metric_value(agent, "agentpool_api_requests") or 0.0
    result.loop_wakes_per_s = (wakes_after - wakes_before) / window
    result.api_per_node_min = (api_after - api_before) / result.nodes / (window / 60)
    result.ticks = t1 - t0
    total = cpu_delta(before, after)
    result.agent_ms = 1000 * total / max(1.0, result.ticks)
    by_role: dict[str, float] = {}
    for pid in before.keys() & after.keys():
        role = roles.get(pid, "workers")
        by_role[role] = by_role.get(role, 0.0) + after[pid] - before[pid]
    result.cpu_by_role = {k: 1000 * v / max(1.0, result.ticks) for k, v in by_role.items()}
    result.cpu_by_thread = {k: 1000 * v / max(1.0, result.ticks)
                            for k, v in by_thread_name(threads_before, threads_after).items()}


def sample_memory(agent: AgentProcess, floors: set[str], minute: float, result: Result) -> None:
    pids = worker_pids(scrape(agent))
    floor_pids = {pids[n] for n in floors if n in pids}
    workers = [p for p in process_tree(agent.pid).workers if p.pid not in floor_pids]
    sleepers = [p for p in process_tree(agent.pid).workers if p.pid in floor_pids]
    pss, floor = memory(workers).pss, memory(sleepers).pss
    result.points.append((minute, median(pss), percentile(pss, 95), median(floor)))
    print(f"  t+{minute:g} min: {len(pss)} workers, median PSS {median(pss) / MIB:.2f} MiB, "
          f"p95 {percentile(pss, 95) / MIB:.2f}, floor {median(floor) / MIB:.2f} "
          f"({len(floor)} sleeping)", file=sys.stderr)


def run(args: argparse.Namespace) -> Result:
    result = Result(args.backend, args.nodes, args.interval)
    names = [f"node-{i:04d}" for i in range(args.nodes)]
    floors = [f"zz-floor-{i:02d}" for i in range(args.floor_workers)]
    with contextlib.ExitStack() as stack, \
            tempfile.TemporaryDirectory(prefix="agentpool-floor-") as tmp, \
            SimCluster(workdir=tmp) as cluster:
        env = {
            "RECONCILE_INTERVAL": f"{args.interval:g}s",
            **workerfaults.env(",".join(f"idle:{n}" for n in floors)),
        }
        if args.heartbeat_timeout:
            env["HEARTBEAT_TIMEOUT"] = args.heartbeat_timeout
        if args.metrics_dir == "shm" and SHM.is_dir():  # as the chart's emptyDir (medium: Memory)
            env["PROMETHEUS_MULTIPROC_DIR"] = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="agentpool-floor-metrics-", dir=SHM))
        trees: dict[str, SysfsTree] = {}
        if args.backend == "host":
            template = str(Path(tmp) / "sys" / "{node}")
            trees = build_nodes(template, names, intel_2socket)
            env["SYSFS_ROOT"] = template
        for name in names:
            cluster.add_node(name, http=args.backend == "http")
        for name in floors:
            cluster.add_node(name, profile="", http=False)
        result.floor_ms = floor_cpu(args, cluster, names, trees)
        print(f"  floor: {result.floor_ms:.3f} ms per node-tick", file=sys.stderr)
        result.wake_ms = wake_cpu(args.interval, args.wakes)
        print(f"  a process's sleep and wake-up: {result.wake_ms:.3f} ms", file=sys.stderr)
        for tree in trees.values():  # the floor loop wrote the cap: back to the start values
            for zone in tree.packages:
                assert zone.pl1 is not None
                zone.pl1.limit_file.write_text(f"{zone.pl1.original_uw}\n")
        started = time.monotonic()
        agent = cluster.start_agent(env)
        wait_until(lambda: applied(args, cluster, names, trees, started), 600, interval=0.1)
        result.startup_s = time.monotonic() - started
        print(f"  start-up: {result.startup_s:.1f} s", file=sys.stderr)
        wait_until(lambda: len(process_tree(agent.pid).workers) == len(names) + len(floors),
                   120, interval=0.5)
        time.sleep(args.settle)
        result.quiet_s = wait_for_quiet_api(cluster, args.nodes)  # past the start-up's writes
        if args.drain_events:
            result.drain_s = drain_events(agent, args.drain_timeout)
            print(f"  Node events written after {result.drain_s:.0f} s more", file=sys.stderr)
        steady_cpu(agent, args.cpu_window, result)
        print(f"  agent: {result.agent_ms:.3f} ms per node-tick ({result.ticks:.0f} ticks)",
              file=sys.stderr)
        for minute in args.minutes:
            time.sleep(max(0.0, started + minute * 60 - time.monotonic()))
            sample_memory(agent, set(floors), minute, result)
        result.load = list(os.getloadavg())
        agent.terminate(timeout=120)
        trees.clear()  # kept until the agent stopped: locked limit files live with their tree
    return result


def report(r: Result, command: str) -> str:
    ratio = r.agent_ms / r.floor_ms if r.floor_ms else float("nan")
    lines = [
        f"### N = {r.nodes}, {r.backend} controls, RECONCILE_INTERVAL={r.interval_s:g}s",
        "",
        f"- command: `{command}`; load average at the end {r.load[0]:.1f} / {r.load[1]:.1f} / "
        f"{r.load[2]:.1f} (1 / 5 / 15 min) on {machine()['cores']} cores",
        "",
        "| quantity | measured | floor | ratio | goal | met |",
        "|---|---|---|---|---|---|",
        f"| start-up: process start to every cap applied (s) | {r.startup_s:.1f} | | | < 5 | "
        f"{'yes' if r.startup_s < 5 else 'no'} |",
        f"| CPU per node-tick, every process of the agent (ms) | {r.agent_ms:.3f} | "
        f"{r.floor_ms:.3f} | {ratio:.1f}x | <= 0.5 | {'yes' if r.agent_ms <= 0.5 else 'no'} |",
    ]
    for role, ms in sorted(r.cpu_by_role.items()):
        lines.append(f"|   of which {role} (ms) | {ms:.3f} | | | | |")
        if role == "supervisor":
            for name, thread_ms in sorted(r.cpu_by_thread.items(), key=lambda kv: -kv[1]):
                if thread_ms >= 0.0005:
                    lines.append(f"|     its thread `{name}` (ms) | {thread_ms:.4f} | | | | |")
            rest = ms - sum(r.cpu_by_thread.values())
            lines.append(f"|     the rest: threads that ended in the window, and `stat`'s 10 ms "
                         f"clock ticks against `schedstat` (ms) | {rest:.4f} | | | | |")
            lines.append(f"|     its main loop's wake-ups a second (the thread's voluntary "
                         f"switches) | {r.loop_wakes_per_s:.1f} | | | | |")
    lines.append(f"| a process's sleep and wake-up alone (ms of CPU; a worker wakes for its "
                 f"timer and for its answer) | {r.wake_ms:.3f} | | | | |")
    for minute, pss, p95, floor in r.points:
        lines.append(
            f"| median / p95 worker PSS at t+{minute:g} min (MiB) | {pss / MIB:.2f} / "
            f"{p95 / MIB:.2f} | {floor / MIB:.2f} | {pss / floor:.2f}x | <= 2.0 / 2.2 | "
            f"{'yes' if pss <= 2 * MIB and p95 <= 2.2 * MIB else 'no'} |")
    if len(r.points) >= 2:
        growth = (r.points[-1][1] - r.points[-2][1]) / MIB
        lines.append(f"| median PSS growth t+{r.points[-2][0]:g} -> t+{r.points[-1][0]:g} min "
                     f"(MiB) | {growth:+.3f} | | | within 0.05 | "
                     f"{'yes' if abs(growth) <= 0.05 else 'no'} |")
    lines.append(f"| node-ticks in the CPU window | {r.ticks:.0f} | | | | |")
    lines.append(f"| Kubernetes API requests in the CPU window, per node and minute (status "
                 f"heartbeats, Events) | {r.api_per_node_min:.3f} | | | | |")
    if r.events_pending is not None:
        lines.append(f"| Node events still to write as the window began (the start-up's, "
                     f"about one a second; `event-recorder` above) | {r.events_pending:.0f} "
                     f"| | | | |")
    if r.drain_s is not None:
        lines.append(f"| seconds waited for them first (`--drain-events`) | {r.drain_s:.0f} "
                     f"| | | | |")
    lines.append(f"| seconds from the settle's end to a quiet API (the window's start) | "
                 f"{r.quiet_s:.0f} | | | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--backend", choices=["http", "host"], default="http")
    p.add_argument("--interval", type=float, default=1.0, help="RECONCILE_INTERVAL, seconds")
    p.add_argument("--minutes", default="10,20", help="memory checkpoints after start")
    p.add_argument("--cpu-window", type=float, default=60.0, help="seconds (floor and agent)")
    p.add_argument("--settle", type=float, default=30.0, help="seconds after start-up")
    p.add_argument("--floor-workers", type=int, default=5)
    p.add_argument("--wakes", type=int, default=10,
                   help="sleeps of the wake-up floor (each the interval long, at most 2 s)")
    p.add_argument("--heartbeat-timeout", default="1h",
                   help="HEARTBEAT_TIMEOUT of the agent; '' leaves the agent's default (then "
                        "--floor-workers must be 0: sleeping workers would be killed as hung)")
    p.add_argument("--drain-events", action="store_true",
                   help="begin the CPU window only once the agent has written the start-up's "
                        "Node events (paced at about one a second: ~15 min at N = 1,000)")
    p.add_argument("--drain-timeout", type=float, default=1800.0,
                   help="seconds --drain-events waits at most")
    p.add_argument("--metrics-dir", choices=["shm", "tmp"], default="shm",
                   help="workers' metrics files in /dev/shm (as the chart: in memory) or in "
                        "the agent's default private directory under the temporary directory")
    p.add_argument("--output", default="-", help="a markdown file to put the section in "
                   "(BENCHMARKS.md), or '-' (default) for stdout only")
    args = p.parse_args(argv)
    if not args.heartbeat_timeout and args.floor_workers:
        p.error("--heartbeat-timeout '' needs --floor-workers 0")
    args.minutes = sorted(float(m) for m in args.minutes.split(",") if m.strip())
    command = "python bench/floor.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"Python {platform.python_version()}", file=sys.stderr)
    section = report(run(args), command.strip())
    print(section)
    if args.output != "-":
        replace_section(Path(args.output), "floor.py", section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
