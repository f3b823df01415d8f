"""Worker and supervisor lifecycle with real processes and signals."""

from __future__ import annotations

import http.client
import itertools
import os
import re
import signal
import time

import psutil

from agentpool.sim import workerfaults
from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until
from agentpool.sim.sysfs.trees import read_int
from agentpool.supervisor.forkclient import SERVER_MODULE
from agentpool.worker.main import EXIT_CRASH
from tests.support.agents import (
    alive,
    all_read,
    host_cluster,
    live_worker_pids,
    pl1_files,
    restarts,
    series,
    worker_pids,
)


def test_a_killed_worker_is_restarted_and_the_others_untouched() -> None:
    with SimCluster() as cluster:
        for name in ("a", "b", "c"):
            cluster.add_node(name)
        agent = cluster.start_agent()
        agent.wait_ready()
        before = wait_until(lambda: p if len(p := worker_pids(agent)) == 3 else None, 20)
        os.kill(before["a"], signal.SIGKILL)
        after = wait_until(
            lambda: p if (p := worker_pids(agent)).get("a", before["a"]) != before["a"] else None,
            20,
        )
        assert after["b"] == before["b"]
        assert after["c"] == before["c"]
        assert restarts(agent, "a") == 1.0
        assert restarts(agent, "b") == 0.0
        assert "killed by SIGKILL" in agent.logs()
        assert agent.terminate() == 0


def test_a_crash_looping_worker_backs_off_and_does_not_delay_the_others() -> None:
    with SimCluster() as cluster:
        for name in ("bad", "good"):
            cluster.add_node(name)
        agent = cluster.start_agent(workerfaults.env("crash-at-start:bad"))
        agent.wait_ready()
        wait_until(lambda: cluster.status("good").get("result") == "applied", 20)
        wait_until(lambda: restarts(agent, "bad") >= 2, 20)
        status = cluster.status("bad")
        assert status["result"] == "error"
        # Its own last words reach the status: what it crashed on.
        assert "crashed: InjectedFault: injected fault: crash-at-start" in status["message"]
        # A crash before the worker's first tick exits with the crash code too, not
        # multiprocessing's generic 1.
        assert status["message"].startswith(
            f"controller restarting: worker died (exited with code {EXIT_CRASH})"
        )
        log = agent.logs()
        # Growing delays: ~1 s, then ~2 s (with up to 0.5 s jitter each).
        delays = [
            float(line.rsplit(" in ", 1)[1].rstrip("s"))
            for line in log.splitlines()
            if "worker for node bad" in line and "died" in line
        ]
        assert len(delays) >= 2
        assert delays[1] > delays[0]
        # After three deaths in a row the node is reported crash-looping, with its count
        # and next attempt, in its status and its metrics (sampled between attempts).
        wait_until(lambda: "crash-looping" in cluster.status("bad").get("message", ""), 30)
        observed = cluster.status("bad")["observed"]
        assert observed["crashLooping"] is True
        assert observed["failures"] >= 3
        assert observed["nextAttempt"].endswith("Z")
        looping = ("agentpool_worker_crash_looping", (("node", "bad"),))
        wait_until(lambda: series(agent.metrics()).get(looping) == 1.0, 30)
        assert series(agent.metrics())[("agentpool_worker_crash_looping", (("node", "good"),))] == 0
        # The healthy node kept ticking every second all along.
        ticks = [r.monotonic for r in cluster.power.requests(node="good", kind="control")]
        assert len(ticks) >= 3
        gap = max(b - a for a, b in itertools.pairwise(ticks))
        print(f"\nlongest gap between the healthy node's ticks: {gap:.2f}s")
        # Measured 1.0 s (the interval); 5 s keeps 5x headroom and still catches a loop
        # that waited on the crashing worker's backoff (1, 2, 4, 8 s...).
        assert gap < 5.0
        assert agent.terminate() == 0


def test_a_hung_worker_is_killed_by_the_heartbeat_and_restarted() -> None:
    with SimCluster() as cluster:
        cluster.add_node("stuck")
        agent = cluster.start_agent(
            {
                **workerfaults.env("hang-in-tick:stuck"),
                "HEARTBEAT_TIMEOUT": "2s",
                "SHUTDOWN_TIMEOUT": "2s",
            }
        )
        agent.wait_ready()
        wait_until(lambda: restarts(agent, "stuck") >= 1, 30)
        log = agent.logs()
        assert "worker for node stuck" in log
        assert "silent for" in log
        assert "unresponsive, killed" in log
        # Its stack was dumped to the log before it was killed: where it hung.
        assert "its stack follows (SIGUSR1)" in log
        wait_until(lambda: "in faulty_tick" in agent.logs(), 10)
        assert agent.terminate() == 0


def test_sigterm_stops_everything_and_restores_host_values() -> None:
    with SimCluster() as cluster:
        template, trees = host_cluster(cluster, ["h0", "h1"])
        originals = {p: read_int(p) for p in pl1_files(trees)}
        agent = cluster.start_agent({"SYSFS_ROOT": template})
        agent.wait_ready()
        # 100 W over two packages: 50 W each on PL1.
        wait_until(lambda: all_read(originals, 50_000_000), 20)
        pids = live_worker_pids(agent, ("h0", "h1"))
        started = time.monotonic()
        assert agent.terminate(timeout=20) == 0
        took = time.monotonic() - started
        print(f"\nSIGTERM to exit with 2 host workers: {took:.2f}s")
        # Measured 0.9 s (10x headroom); SHUTDOWN_TIMEOUT (10 s) would mean a worker was killed.
        assert took < 10
        assert {p: read_int(p) for p in originals} == originals
        assert not any(alive(pid) for pid in pids.values())
        for name in ("h0", "h1"):
            assert cluster.status(name)["message"] == "agent stopped; host limits restored"


def test_a_sigkilled_supervisor_leaves_no_worker_and_no_throttled_host() -> None:
    with SimCluster() as cluster:
        template, trees = host_cluster(cluster, ["h0", "h1"])
        originals = {p: read_int(p) for p in pl1_files(trees)}
        agent = cluster.start_agent({"SYSFS_ROOT": template})
        agent.wait_ready()
        pids = wait_until(lambda: p if len(p := worker_pids(agent)) == 2 else None, 20)
        wait_until(lambda: all_read(originals, 50_000_000), 20)
        agent.kill()
        killed_at = time.monotonic()
        wait_until(lambda: not any(alive(pid) for pid in pids.values()), 10)
        took = time.monotonic() - killed_at
        print(f"\nworkers gone after the supervisor's SIGKILL: {took:.2f}s")
        # Measured 0.05 s: they notice at once (parent-death signal), not by polling; 2 s
        # keeps 40x headroom.
        assert took < 2.0
        # Each worker restored its node on the way out (parent-death signal).
        assert {p: read_int(p) for p in originals} == originals


def test_daemonset_mode_controls_exactly_its_own_node() -> None:
    with SimCluster() as cluster:
        for name in ("worker-0", "worker-1", "worker-2"):
            cluster.add_node(name, managed=name != "worker-1")
        agent = cluster.start_agent({"AGENT_MODE": "daemonset", "NODE_NAME": "worker-1"})
        agent.wait_ready()
        wait_until(lambda: cluster.status("worker-1").get("result") == "applied", 20)
        live_worker_pids(agent, {"worker-1"})
        assert set(cluster.controlled_nodes()) == {"worker-1"}
        # Only that node is watched: a change elsewhere is not even seen.
        counts = cluster.emulator.request_counts()
        assert counts[("list", "nodes")] == 1
        assert agent.terminate() == 0


def test_a_dead_fork_server_is_replaced_and_every_worker_restarted() -> None:
    with SimCluster() as cluster:
        for name in ("a", "b"):
            cluster.add_node(name)
        agent = cluster.start_agent()
        agent.wait_ready()
        before = wait_until(lambda: p if len(p := worker_pids(agent)) == 2 else None, 20)
        children = psutil.Process(agent.pid).children()
        server = next(c for c in children if SERVER_MODULE in " ".join(c.cmdline()))
        server.kill()
        # Its workers exit on the parent-death signal; new ones come from a new fork server.
        after = wait_until(
            lambda: (
                p
                if len(p := worker_pids(agent)) == 2 and not set(p.values()) & set(before.values())
                else None
            ),
            30,
        )
        assert not any(alive(pid) for pid in before.values())
        assert set(after) == {"a", "b"}
        assert agent.terminate() == 0


def test_a_hung_worker_flooded_with_changes_cannot_block_the_loop() -> None:
    # A worker that stopped reading (its tick hangs) plus a burst of changes fills its
    # pipe: the loop must go on turning, the heartbeat check that kills it included.
    with SimCluster() as cluster:
        cluster.add_node("stuck")
        cluster.add_node("fine")
        agent = cluster.start_agent(
            {
                **workerfaults.env("hang-in-tick:stuck"),
                "HEARTBEAT_TIMEOUT": "5s",
                "SHUTDOWN_TIMEOUT": "2s",
            }
        )
        agent.wait_ready()
        wait_until(lambda: cluster.status("fine").get("result") == "applied", 20)
        for i in range(1500):  # each change is a message to a worker that never reads
            cluster.set_cap("stuck", 100 + i)
        wait_until(lambda: restarts(agent, "stuck") >= 1, 30)
        assert agent.get("/healthz")[0] == 200
        cluster.set_cap("fine", 77)
        wait_until(lambda: cluster.status("fine").get("message", "").find("77") >= 0, 20)
        assert agent.terminate() == 0


def test_no_descendant_outlives_the_supervisor() -> None:
    # The fork server and every worker must go with the supervisor, not outlive it.
    with SimCluster() as cluster:
        for name in ("a", "b"):
            cluster.add_node(name)
        agent = cluster.start_agent()
        agent.wait_ready()
        wait_until(lambda: len(worker_pids(agent)) == 2, 20)
        descendants = psutil.Process(agent.pid).children(recursive=True)
        assert len(descendants) >= 3  # the fork server, the resource tracker, two workers
        assert agent.terminate() == 0
        left = [p.pid for p in descendants if alive(p.pid)]
        assert not left, f"still running after the supervisor exited: {left}"


def test_a_descriptor_limit_too_small_for_the_owned_nodes_fails_clearly() -> None:
    # 300 descriptors cover (300 - 256 reserved) // 5 per node = 8 nodes.
    with SimCluster() as cluster:
        for i in range(10):
            cluster.add_node(f"n{i}")
        agent = cluster.start_agent(wrap=["prlimit", "--nofile=300:300"])
        code = agent.process.wait(60)
        assert code == 1
        assert "this pod owns 10 nodes but RLIMIT_NOFILE covers 8" in agent.logs()
        too_small = cluster.start_agent(wrap=["prlimit", "--nofile=200:200"])
        assert too_small.process.wait(60) == 1
        assert "RLIMIT_NOFILE (200) leaves no descriptors for a worker" in too_small.logs()


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one() -> None:
    with SimCluster() as cluster:
        for i in range(10):
            cluster.add_node(f"n{i}")
        agent = cluster.start_agent(wrap=["prlimit", "--nofile=64:4096"])
        agent.wait_ready()
        wait_until(lambda: len(worker_pids(agent)) == 10, 30)
        assert psutil.Process(agent.pid).rlimit(psutil.RLIMIT_NOFILE) == (4096, 4096)
        assert agent.terminate() == 0


def test_start_up_says_how_long_the_process_took_to_be_ready() -> None:
    # The time to ready the e2e suite reports for each pod comes from this line.
    with SimCluster() as cluster:
        cluster.add_node("worker-0")
        launched = time.monotonic()
        agent = cluster.start_agent({"AGENT_MODE": "daemonset", "NODE_NAME": "worker-0"})
        agent.wait_ready()
        pattern = re.compile(r"caches synced (\d+\.\d+)s after the process started: ready")
        found = wait_until(lambda: pattern.search(agent.logs()), 20)
        took = float(found[1])
        assert 0 < took <= time.monotonic() - launched + 0.02  # /proc counts in 10 ms steps
        assert agent.terminate() == 0


def test_probes_are_answered_ok_until_the_process_exits() -> None:
    # The kubelet probes a terminating pod until its container exits: a refused or 503
    # probe while the agent stops is a failed probe in every rolling update. Only a probe
    # caught by the exit itself (the kernel closing the socket) may fail.
    with SimCluster() as cluster:
        cluster.add_node("worker-0")
        agent = cluster.start_agent({"AGENT_MODE": "daemonset", "NODE_NAME": "worker-0"})
        agent.wait_ready()
        wait_until(lambda: cluster.status("worker-0").get("result"), 20)
        failures: list[tuple[float, str]] = []
        answered = 0
        agent.process.send_signal(signal.SIGTERM)
        while agent.process.poll() is None:
            for path in ("/readyz", "/healthz"):
                try:
                    code, body = agent.get(path, timeout=5)
                    problem = None if code == 200 else f"{path}: {code} {body.strip()}"
                except (OSError, http.client.HTTPException) as exc:  # cut off by the exit
                    problem = f"{path}: {exc!r}"
                if problem is None:
                    answered += 1
                else:
                    failures.append((time.monotonic(), problem))
        exited = time.monotonic()
        assert agent.terminate() == 0
        assert [problem for at, problem in failures if at < exited - 0.25] == []
        assert answered > 0
