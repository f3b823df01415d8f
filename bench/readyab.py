"""Ready, side by side: a pool pod started on two checkouts in turn, on one real API server.

A start-up's time on this 2-core machine moves with the machine's moment by more than a
change to it saves, so one run before and one after say little (issue 46: 2.95 s, then
4.44 s, for the same code). This seeds a real kube-apiserver (envtest,
``KUBEBUILDER_ASSETS``) once with N nodes as ``bench/clustersize.py`` does (``--nodes``,
5,000), then starts shard 0 of a static pool of N / 50 shards (about 50 owned nodes),
``--rounds`` times on each checkout, alternately (``--before`` first, then this one), each
to ``/readyz`` 200 and stopped. ``--busy`` keeps one core busy meanwhile (a process that
only spins), as on a node whose other pods are working. For each start it prints ready
(spawn to ``/readyz`` 200), the CPU the API server and etcd spent meanwhile, and the CPU
of the agent's processes by then.

    git worktree add /tmp/before <commit>
    KUBEBUILDER_ASSETS=... .venv/bin/python bench/readyab.py --before /tmp/before   # ~4 min
    .venv/bin/python bench/readyab.py --before /tmp/before --nodes 200 --rounds 1

A checkout is chosen by ``PYTHONPATH``, and the agents start in a directory outside both,
so that ``python -m agentpool`` imports the one named. Prints only; no goal is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from clusterobjects import Connections, seed
from measure import cpu_seconds

from agentpool.sim.cluster import SimCluster
from agentpool.sim.envtest import ADMIN, EnvtestServer

ROOT = Path(__file__).resolve().parents[1]
SERVER_PROCESSES = ("kube-apiserver", "etcd")


def server_cpu() -> float:
    """CPU seconds the API server and etcd have spent so far."""
    procs = [p for p in psutil.process_iter(["name"]) if p.info["name"] in SERVER_PROCESSES]
    return sum(cpu_seconds(procs).values())


def agent_cpu(pid: int) -> float:
    """CPU seconds of the agent's processes (the supervisor and every child) so far."""
    root = psutil.Process(pid)
    return sum(cpu_seconds([root, *root.children(recursive=True)]).values())


def start_once(cluster: SimCluster, checkout: Path, shards: int, name: str) -> tuple[float, ...]:
    env = {"RECONCILE_INTERVAL": "20s", **cluster.routing_env(), "AGENT_MODE": "pool",
           "POOL_SHARDS": str(shards), "POOL_SHARD_ID": "0", "PYTHONPATH": str(checkout)}
    before = server_cpu()
    started = time.monotonic()
    agent = cluster.start_agent(env, name=name)
    try:
        agent.wait_ready(120)
        ready = time.monotonic() - started
        return ready, server_cpu() - before, agent_cpu(agent.pid)
    finally:
        if agent.terminate(timeout=60) != 0:
            raise RuntimeError(f"the agent exited badly:\n{agent.logs()[-4000:]}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--before", required=True, type=Path, help="the other checkout's root")
    p.add_argument("--nodes", type=int, default=5000, help="cluster size (5,000)")
    p.add_argument("--rounds", type=int, default=3, help="starts on each checkout (3)")
    p.add_argument("--busy", action="store_true", help="keep one core busy meanwhile")
    opts = p.parse_args(argv)
    checkouts = {"before": opts.before.resolve(), "this": ROOT}
    for path in checkouts.values():
        if not (path / "agentpool" / "__main__.py").is_file():
            raise SystemExit(f"{path}: no agentpool checkout there")
    names = [f"worker-{i:05d}.dc1.example.com" for i in range(opts.nodes)]
    shards = max(1, opts.nodes // 50)
    results: dict[str, list[tuple[float, ...]]] = {which: [] for which in checkouts}
    with tempfile.TemporaryDirectory(prefix="agentpool-readyab-") as tmp, \
            EnvtestServer(workdir=Path(tmp) / "envtest") as server, \
            SimCluster(workdir=Path(tmp) / "sim", server=server, api="nodetwin") as cluster:
        os.chdir(tmp)  # -m imports from the working directory first
        seed(Connections(server.url, server.users[ADMIN].token, server.ssl_context()), names)
        spinner = (subprocess.Popen([sys.executable, "-c", "while True: pass"])
                   if opts.busy else None)
        try:
            for round_ in range(opts.rounds):
                for which, checkout in checkouts.items():
                    row = start_once(cluster, checkout, shards, f"{which}-{round_}")
                    results[which].append(row)
                    print(f"{which} {round_}: ready {row[0]:.2f} s, API server + etcd CPU "
                          f"{row[1]:.2f} s, agent CPU {row[2]:.2f} s", file=sys.stderr,
                          flush=True)
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
    print(f"{opts.nodes:,} nodes, shard 0 of {shards}, {opts.rounds} starts each"
          f"{', one core kept busy' if opts.busy else ''} (before: {checkouts['before']}):")
    for which, rows in results.items():
        ready = ", ".join(f"{r[0]:.2f}" for r in rows)
        print(f"- {which}: ready {ready} s (median {statistics.median(r[0] for r in rows):.2f});"
              f" API server + etcd CPU {min(r[1] for r in rows):.2f}-"
              f"{max(r[1] for r in rows):.2f} s; agent CPU {min(r[2] for r in rows):.2f}-"
              f"{max(r[2] for r in rows):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
