"""The supervisor loop's decisions on a fake clock, with stand-in worker processes.

Each rule is checked exactly, and each test takes milliseconds: restart and
backoff, heartbeat kill (and the heartbeat's derivation), scope changes,
stop deadlines, shutdown, spawn failures, sends that may not block, and a
node's replacement process waiting for its predecessor to be gone.
"""

from __future__ import annotations

import errno
import itertools
import os
import pickle
import socket
import struct
import subprocess
import threading
import time
from multiprocessing.reduction import ForkingPickler
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from agentpool.config.settings import load_settings
from agentpool.kube.api import Resource
from agentpool.kube.writehold import WriteHold
from agentpool.resources.nodeinputs import NodeInputs
from agentpool.results import Backend, Result, TickResult
from agentpool.supervisor.clusterview import heartbeat_limit
from agentpool.supervisor.deadlines import Deadlines
from agentpool.supervisor.forkclient import Deferred
from agentpool.supervisor.handles import Launched, WorkerHandle
from agentpool.supervisor.lifecycle import StopReason, WorkerState
from agentpool.supervisor.loop import EXIT_FATAL, KILL_GRACE_S, MAX_STARTS_PER_TURN
from agentpool.worker.cadence import early_s
from agentpool.worker.nodefiles import metrics_id
from agentpool.worker.protocol import Fence, Stopped, TickReport
from tests.support.fakeworkers import MANAGED, FakeLauncher, Loop, node, power, telemetry


def test_a_node_in_scope_gets_one_worker_with_its_inputs() -> None:
    with Loop() as loop:
        loop.change(Resource.NODE_POWER_PROFILES, power("p-a", "a", 120), "ADDED")
        loop.nodes("a")
        loop.turn()
        [worker] = loop.launcher.started
        assert worker.node == "a"
        assert worker.inputs is not None
        assert worker.inputs.power_profile is not None
        assert loop.handle("a").state is WorkerState.STARTING
        worker.report()
        loop.turn()
        assert loop.handle("a").state is WorkerState.RUNNING
        loop.turn(5.0)
        assert len(loop.launcher.started) == 1


def test_no_worker_starts_before_every_cache_has_listed() -> None:
    with Loop() as loop:
        loop.synced = False
        loop.nodes("a")  # the node is known, its profiles not yet: host defaults would apply
        for _ in range(5):
            loop.turn()
        assert loop.launcher.started == []
        loop.change(Resource.NODE_POWER_PROFILES, power("p-a", "a", 120), "ADDED")
        loop.synced = True
        loop.turn()  # no new event needed: the next scan starts it
        [worker] = loop.launcher.started
        assert worker.inputs is not None
        assert worker.inputs.power_profile is not None


def test_a_dead_worker_restarts_after_its_backoff_and_the_delay_doubles() -> None:
    with Loop() as loop:
        loop.change(Resource.TELEMETRY_PROFILES, telemetry("t-a", "a"), "ADDED")
        loop.nodes("a")
        loop.turn()
        first = loop.launcher.started[0]
        first.process.exit(70)
        loop.turn()
        handle = loop.handle("a")
        assert handle.state is WorkerState.BACKOFF
        status = loop.status.last("a")
        assert status is not None
        assert status.result is Result.ERROR
        assert "worker died (exited with code 70); restart 1 in" in status.message
        # First delay: 1 s plus up to 0.5 s of jitter.
        assert 1.0 <= handle.restart_at - loop.clock.now <= 1.5 + 0.01
        loop.turn(0.9)
        assert len(loop.launcher.started) == 1
        loop.turn(0.7)
        assert len(loop.launcher.started) == 2
        assert handle.policy.restarts == 1
        loop.launcher.started[1].process.exit(1)
        loop.turn()
        assert 2.0 <= handle.restart_at - loop.clock.now <= 2.5 + 0.01


def test_a_silent_worker_is_terminated_then_killed_then_restarted() -> None:
    with Loop(FakeLauncher(obeys_sigterm=False), heartbeat_timeout_s=90.0) as loop:
        loop.change(Resource.TELEMETRY_PROFILES, telemetry("t-a", "a"), "ADDED")
        loop.nodes("a")
        loop.turn()
        worker = loop.launcher.started[0]
        worker.report()
        loop.turn()
        loop.turn(89.0)
        assert worker.process.signals == []
        loop.turn(1.5)
        assert worker.process.signals == ["SIGTERM"]
        assert loop.handle("a").stop_reason is StopReason.HEARTBEAT
        loop.turn(KILL_GRACE_S - 0.5)
        assert worker.process.signals == ["SIGTERM"]
        loop.turn(0.6)
        assert worker.process.signals == ["SIGTERM", "SIGKILL"]
        loop.turn()
        status = loop.status.last("a")
        assert status is not None
        assert "worker unresponsive, killed (killed by SIGKILL)" in (
            status.message
        )
        loop.turn(2.0)
        assert len(loop.launcher.started) == 2


class CountingDeadlines(Deadlines):
    """The worker table's deadlines, counting the workers each look takes as due."""

    def __init__(self, loop_period_s: float) -> None:
        super().__init__(loop_period_s)
        self.taken = 0

    def due(self, now: float) -> list[WorkerHandle]:
        found = super().due(now)
        self.taken += len(found)
        return found


def test_quiet_workers_are_looked_at_when_a_deadline_of_theirs_falls_due() -> None:
    # Three workers ticking every 10 s, heartbeat limit 30 s, so silence fences of 30 s,
    # renewed at the tick time before half of each is spent; the loop turns every 0.1 s
    # for a simulated minute. A worker's moments: its renewals (the full pass every 30 s
    # looks at each as well, whatever its deadlines).
    with Loop(heartbeat_timeout_s=30.0) as loop:
        table = loop.supervisor.table
        table.deadlines = counting = CountingDeadlines(table.deadlines.loop_period_s)
        loop.nodes("a", "b", "c")
        loop.turn()
        workers = loop.launcher.started
        assert len(workers) == 3
        before = counting.taken
        for step in range(600):
            if step % 100 == 0:
                for worker in workers:
                    worker.report()
            loop.turn(0.1)
        looked_at = counting.taken - before
        # Each worker for each of its 6 renewals, and for nothing else (the two full
        # passes aside); looking at each at every turn would be 1,800.
        assert looked_at == 3 * 6
        assert all(w.process.signals == [] for w in workers)
        for worker in workers:
            _, *renewed = fences_of(worker)  # the first came with the start
            # At the start, then just before each tick time of the 10 s grid, by as much as
            # a worker woken before its tick ticks at once (1 s), so that the renewal wakes
            # it for its tick (half of a fence is 15 s: the tick time before it is 10 s
            # after the last renewal).
            assert len(renewed) == 6
            sent = [f.times.stop_at - 30.0 for f in renewed]
            ticks = [t + early_s(10.0) for t in sent]
            assert all(abs(t - round(t / 10.0) * 10.0) < 0.11 for t in ticks), sent
            assert all(f.times.stop_at > t + 29 for f, t in zip(renewed, sent, strict=True))
        assert all(loop.handle(n).state is WorkerState.RUNNING for n in "abc")


def test_a_mass_start_is_published_once_a_loop_period_and_an_exit_at_once() -> None:
    # The snapshot behind /metrics' worker series covers every worker: rebuilt at each
    # turn of a mass start it cost hundreds of full passes. Starts and first reports wait
    # for the next loop period; a worker that is gone leaves it at once (an elastic
    # handoff must never look like two pods holding one node).
    with Loop(loop_period_s=0.5) as loop:
        collector = loop.supervisor.reporting.collector
        loop.nodes(*(f"n{i:03d}" for i in range(3 * MAX_STARTS_PER_TURN)))
        loop.turn()  # the loop's first check: the first batch, published
        first = collector._snapshot
        assert len(first.workers) == MAX_STARTS_PER_TURN
        loop.turn(0.1)
        loop.turn(0.1)  # two more batches within the same loop period
        assert len(loop.launcher.started) == 3 * MAX_STARTS_PER_TURN
        assert collector._snapshot is first
        loop.turn(0.3)  # the next check
        latest = collector._snapshot
        assert len(latest.workers) == 3 * MAX_STARTS_PER_TURN
        loop.turn(0.1)
        loop.launcher.started[0].process.exit(1)
        loop.turn(0.01)  # within the loop period, and published all the same
        assert collector._snapshot is not latest
        assert collector._snapshot.workers[loop.launcher.started[0].node].pid is None


def test_status_writes_are_held_while_workers_start() -> None:
    # Enforce first: from the first batch of a mass start until every worker started has
    # reported its first tick, the status and NodeHardware writers wait.
    hold = WriteHold(max_s=60.0)
    with Loop(loop_period_s=0.5, write_hold=hold) as loop:
        loop.nodes(*(f"n{i:03d}" for i in range(2 * MAX_STARTS_PER_TURN)))
        loop.turn()
        assert hold.remaining() > 0  # more to start
        loop.turn(0.1)
        assert len(loop.launcher.started) == 2 * MAX_STARTS_PER_TURN
        for worker in loop.launcher.started[1:]:
            worker.report()
        loop.turn(0.5)
        assert hold.remaining() > 0, "one worker has not reported yet"
        loop.launcher.started[0].report()
        loop.turn(0.5)
        assert hold.remaining() == 0


def test_the_heartbeat_covers_the_longest_legal_tick_of_the_node() -> None:
    # A TelemetryProfile may legally let one tick wait 4 x 300 s on a slow endpoint: the
    # heartbeat limit follows the profile, so such a worker is not killed as hung.
    with Loop() as loop:
        loop.change(Resource.TELEMETRY_PROFILES, telemetry("t-a", "a", 300), "ADDED")
        loop.nodes("a", "b")
        loop.turn()
        a, b = sorted(loop.launcher.started, key=lambda w: w.node)
        a.report()
        b.report()
        loop.turn()
        loop.turn(200.0)
        assert a.process.signals == []
        assert b.process.signals == ["SIGTERM"], "no TelemetryProfile: 3 x 10 s + 30 s"
        limit = loop.handle("a").heartbeat_s
        assert limit == 10.0 + 4 * 300.0 + 30.0
        loop.turn(limit - 200.0 + 1.0)
        assert a.process.signals == ["SIGTERM"]


def test_heartbeat_limit_rules() -> None:
    with Loop() as loop:
        settings = loop.settings
    assert heartbeat_limit(settings, None) == 3 * 10.0 + 30.0
    assert heartbeat_limit(settings, telemetry("t", "a", 2)) == 3 * 10.0 + 30.0
    assert heartbeat_limit(settings, telemetry("t", "a", 60)) == 10.0 + 4 * 60.0 + 30.0
    # A malformed timeout sends nothing: the worker reports the error at once.
    assert heartbeat_limit(settings, telemetry("t", "a", 10_000)) == 3 * 10.0 + 30.0
    with Loop(heartbeat_timeout_s=5.0) as loop:
        assert heartbeat_limit(loop.settings, telemetry("t", "a", 300)) == 5.0


def test_a_worker_whose_pipe_stays_full_is_treated_as_hung_and_the_loop_never_blocks() -> None:
    # Sends never block: a worker that stopped reading cannot stop the loop, nor the
    # heartbeat check that kills that worker.
    with Loop(heartbeat_timeout_s=30.0) as loop:
        loop.nodes("a", "b")
        loop.turn()
        hung, healthy = sorted(loop.launcher.started, key=lambda w: w.node)
        done = threading.Event()

        def burst() -> None:
            for cap in range(1, 3001):  # far more than a socket buffer holds
                loop.change(Resource.NODE_POWER_PROFILES, power("p-a", "a", cap + 0.5))
                loop.change(Resource.NODE_POWER_PROFILES, power("p-b", "b", cap + 0.5))
                loop.turn()
                healthy.report()
                while healthy.pipe.poll(0):
                    healthy.pipe.recv()
            done.set()

        thread = threading.Thread(target=burst, daemon=True)
        thread.start()
        thread.join(60)
        assert done.is_set(), "the loop blocked on a worker's pipe"
        handle = loop.handle("a")
        assert handle.outbox, "the hung worker's pipe should be full by now"
        assert handle.unsent is not None
        assert handle.unsent.power_profile is not None
        assert handle.unsent.power_profile["spec"]["cpu"]["packagePowerCapWatts"] == 3000.5
        loop.turn(31.0)
        assert hung.process.signals == ["SIGTERM"]
        assert healthy.process.signals == []
        # The healthy worker got every change, the latest last.
        latest = None
        while healthy.pipe.poll(0):
            message = healthy.pipe.recv()
            latest = latest if isinstance(message, Fence) else message
        assert loop.handle("b").last_sent.power_profile["spec"]["cpu"]["packagePowerCapWatts"] == (
            3000.5
        )
        assert latest is None or latest.power_profile is not None


def test_a_failed_spawn_backs_off_with_the_reason_in_the_status() -> None:
    # An OSError from spawning stays inside the loop: the node backs off like a death.
    launcher = FakeLauncher(fail_with=OSError(errno.EMFILE, "Too many open files"))
    with Loop(launcher) as loop:
        loop.change(Resource.TELEMETRY_PROFILES, telemetry("t-a", "a"), "ADDED")
        loop.nodes("a")
        loop.turn()
        handle = loop.handle("a")
        assert handle.state is WorkerState.BACKOFF
        status = loop.status.last("a")
        assert status is not None
        assert status.result is Result.ERROR
        assert "worker not started (OSError: [Errno 24] Too many open files)" in status.message
        launcher.fail_with = None
        loop.turn(1.6)
        assert [w.node for w in launcher.started] == ["a"]
        assert handle.state is WorkerState.STARTING


class BatchLauncher(FakeLauncher):
    """A launcher that starts a batch in one call; ``refuse`` nodes get an OSError each, and
    every node is deferred while ``starting`` (its fork server's warm-up)."""

    def __init__(self, refuse: set[str]) -> None:
        super().__init__()
        self.refuse = refuse
        self.starting = False
        self.batches: list[list[str]] = []

    def many(self, starts: list[tuple[str, NodeInputs | None]]) -> list[Launched]:
        self.batches.append([node for node, _ in starts])
        if self.starting:
            return [Deferred("fork server (pid 1) is still starting")] * len(starts)
        return [OSError(errno.ENOMEM, "Cannot allocate memory") if node in self.refuse
                else self(node, inputs) for node, inputs in starts]


def test_a_turns_starts_go_to_the_launcher_in_one_batch_and_a_refused_one_backs_off() -> None:
    launcher = BatchLauncher(refuse={"n07"})
    names = [f"n{i:02d}" for i in range(MAX_STARTS_PER_TURN + 6)]
    with Loop(launcher) as loop:
        loop.nodes(*names)
        loop.turn()
        assert launcher.batches == [names[:MAX_STARTS_PER_TURN]]
        assert loop.handle("n07").state is WorkerState.BACKOFF  # as a failed single start
        assert loop.handle("n07").policy.restarts == 0
        first = [n for n in names[:MAX_STARTS_PER_TURN] if n != "n07"]
        assert all(loop.handle(n).state is WorkerState.STARTING for n in first)
        assert set(loop.supervisor.workers) == set(names[:MAX_STARTS_PER_TURN])
        loop.turn()  # the rest at the next turn, in a batch of their own
        assert launcher.batches[1] == names[MAX_STARTS_PER_TURN:]
        assert sorted(w.node for w in launcher.started) == [n for n in names if n != "n07"]


def test_starts_wait_for_a_fork_server_still_starting_and_nothing_counts_as_failed() -> None:
    launcher = BatchLauncher(refuse=set())
    launcher.starting = True
    with Loop(launcher) as loop:
        loop.nodes("a", "b")
        loop.turn()
        assert launcher.batches == [["a", "b"]]
        assert launcher.started == []
        for name in "ab":
            handle = loop.handle(name)
            assert handle.state is WorkerState.DEFERRED
            assert handle.policy.failures == 0
            assert handle.last_failure == ""
            assert loop.status.last(name) is None  # no "not started" status written
        loop.turn()  # asked again one loop period later, in one batch, still starting
        assert launcher.batches[1:] == [["a", "b"]]
        launcher.starting = False
        loop.turn()
        assert launcher.batches[2:] == [["a", "b"]]
        assert sorted(w.node for w in launcher.started) == ["a", "b"]
        for name in "ab":
            handle = loop.handle(name)
            assert handle.state is WorkerState.STARTING
            assert (handle.policy.failures, handle.policy.restarts) == (0, 0)  # no restart


def test_an_unexpected_error_stops_everything_in_order_with_a_nonzero_exit() -> None:
    with Loop() as loop:
        loop.change(Resource.TELEMETRY_PROFILES, telemetry("t-a", "a"), "ADDED")
        loop.nodes("a")
        loop.turn()
        worker = loop.launcher.started[0]

        def broken(*args: object) -> set[str]:
            raise RuntimeError("a bug in the loop")

        loop.supervisor.view.apply = broken  # type: ignore[method-assign]
        loop.nodes("a")
        loop.clock.step = 0.01
        assert loop.supervisor.run() == EXIT_FATAL
        assert worker.process.signals == ["SIGTERM"]
        status = loop.status.last("a")
        assert status is not None
        assert status.message == "agent stopped; host limits restored"


def test_nodes_leaving_and_returning_to_scope() -> None:
    with Loop(FakeLauncher(obeys_sigterm=False)) as loop:
        loop.nodes("a", "b")
        loop.turn()
        a, b = sorted(loop.launcher.started, key=lambda w: w.node)
        loop.nodes("b")  # "a" is gone
        loop.turn()
        assert a.process.signals == ["SIGTERM"]
        assert loop.handle("a").stop_reason is StopReason.SCOPE
        loop.nodes("a", "b")  # back before its worker exited: no second process yet
        loop.turn()
        loop.turn(1.0)
        assert len(loop.launcher.of("a")) == 1
        a.process.exit(0)  # restored the host and exited
        loop.turn()
        loop.turn()
        assert len(loop.launcher.of("a")) == 2, "a new worker once the old one is gone"
        assert b.process.signals == []


def test_profile_changes_reach_the_worker_without_rescoping_node_changes_rescope() -> None:
    # Every status the agent writes comes back as a TelemetryProfile change: visiting
    # every node's scope for each would cost the supervisor O(nodes) per status write.
    with Loop() as loop:
        loop.nodes("a", "b")
        loop.turn()
        [a] = loop.launcher.of("a")
        a.report()
        loop.turn()
        rescopes: list[int] = []
        owned = loop.supervisor.view.owned
        loop.supervisor.view.owned = lambda: rescopes.append(1) or owned()  # type: ignore[method-assign]
        loop.change(Resource.TELEMETRY_PROFILES, telemetry("t-a", "a"), "ADDED")
        loop.change(Resource.NODE_POWER_PROFILES, power("p-a", "a", 150), "ADDED")
        loop.turn()
        assert rescopes == []
        sent = None
        while sent is None and a.pipe.poll(1.0):  # fences may come first
            if isinstance(message := a.pipe.recv(), NodeInputs):
                sent = message
        assert sent is not None, "the new inputs were sent all the same"
        assert sent.power_profile is not None
        assert sent.telemetry_profile is not None
        loop.change(Resource.NODES, node("c", **MANAGED), "ADDED")
        loop.turn()
        assert rescopes == [1]
        assert len(loop.launcher.of("c")) == 1
        loop.nodes("a", "b", "c")
        loop.turn()
        assert rescopes == [1, 1]


def test_a_scope_stop_that_overstays_is_killed_at_the_shutdown_timeout() -> None:
    with Loop(FakeLauncher(obeys_sigterm=False)) as loop:
        loop.nodes("a")
        loop.turn()
        worker = loop.launcher.started[0]
        loop.nodes()
        loop.turn()
        loop.turn(19.9)
        assert worker.process.signals == ["SIGTERM"]
        loop.turn(0.2)
        assert worker.process.signals == ["SIGTERM", "SIGKILL"]
        loop.turn()
        assert "a" not in loop.supervisor.workers


def test_shutdown_stops_all_at_once_kills_the_rest_together_and_writes_final_statuses() -> None:
    with Loop() as loop:
        names = [f"n{i}" for i in range(6)]
        for name in names:
            loop.change(Resource.TELEMETRY_PROFILES, telemetry(f"t-{name}", name), "ADDED")
        loop.nodes(*names)
        loop.turn()
        stubborn = {"n1", "n4"}
        for worker in loop.launcher.started:
            worker.process.obeys_sigterm = worker.node not in stubborn
        loop.supervisor.signals.put(15)
        loop.clock.step = 0.5
        assert loop.supervisor.run() == 0
        for worker in loop.launcher.started:
            expected = ["SIGTERM", "SIGKILL"] if worker.node in stubborn else ["SIGTERM"]
            assert worker.process.signals == expected, worker.node
        assert not loop.supervisor.table.running()
        for name in names:
            status = loop.status.last(name)
            assert status is not None
            assert status.message == "agent stopped; host limits restored"


def test_a_replacement_waits_until_the_previous_process_is_gone() -> None:
    # A worker orphaned by its fork server may still be restoring the host: its
    # replacement must not start (and write the same files) until it is gone.
    lingering = subprocess.Popen(["sleep", "60"])
    try:
        launcher = FakeLauncher(pids=itertools.chain([lingering.pid], itertools.count(10**9 + 7)))
        with Loop(launcher) as loop:
            loop.nodes("a")
            loop.turn()
            old = launcher.started[0]
            old.process.exit(255)  # what a worker of a dead fork server reports
            loop.turn()
            handle = loop.handle("a")
            assert handle.lingering == lingering.pid
            loop.turn(5.0)
            loop.turn(5.0)
            assert len(launcher.started) == 1, "a second process for the node"
            lingering.terminate()
            lingering.wait(10)
            loop.turn()
            assert handle.lingering is None
            assert handle.state is WorkerState.BACKOFF
            loop.turn(1.6)
            assert len(launcher.started) == 2
    finally:
        lingering.kill()
        lingering.wait(10)


def test_a_lingering_process_is_killed_after_the_shutdown_timeout() -> None:
    lingering = subprocess.Popen(["sleep", "60"])
    try:
        launcher = FakeLauncher(pids=iter([lingering.pid]))
        with Loop(launcher) as loop:
            loop.nodes("a")
            loop.turn()
            launcher.started[0].process.exit(255)
            loop.turn()
            loop.turn(19.0)
            assert lingering.poll() is None
            loop.turn(1.5)
            assert lingering.wait(10) == -9
    finally:
        lingering.kill()
        lingering.wait(10)


@pytest.mark.parametrize("reason", ["scope", "restart"])
def test_node_files_follow_the_worker(reason: str) -> None:
    with Loop() as loop:
        loop.nodes("a")
        loop.turn()
        files = loop.supervisor.spawning.files
        journal = files.journal("a")
        assert metrics_id("a") in journal
        assert journal.startswith(files.state_dir)
        open(journal, "w").close()
        if reason == "scope":
            loop.nodes()
            loop.turn()
            loop.turn()
            assert "a" not in loop.supervisor.workers
            assert not os.path.exists(journal), "forgotten with its node"
        else:
            loop.launcher.started[0].process.exit(70)
            loop.turn()
            assert os.path.exists(journal), "kept for the restarted worker"


def test_the_heartbeat_covers_endpoints_routed_by_the_environment_and_gpu_requests() -> None:
    # The NodeTwin API has no TelemetryProfile: TELEMETRY_* route every node, with
    # TELEMETRY_HTTP_TIMEOUT_SECONDS up to 300 s, GPU requests included.
    env = {
        "TELEMETRY_CPU_SOURCE": "http", "TELEMETRY_CPU_HTTP_ENDPOINT": "http://sim/t/{node}",
        "TELEMETRY_CPU_CONTROL": "http",
        "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT": "http://sim/c/{node}",
        "TELEMETRY_HTTP_TIMEOUT_SECONDS": "300",
    }
    env["AGENT_MODE"] = "pool"
    cpu_only = load_settings({**env, "RECONCILE_INTERVAL": "10s"})
    assert heartbeat_limit(cpu_only, None) == 10.0 + 4 * 300.0 + 30.0
    gpu = load_settings({**env, "RECONCILE_INTERVAL": "10s", "TELEMETRY_GPU_CONTROL": "http",
                         "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT": "http://sim/c/{node}"})
    # Its GPU telemetry rides on the CPU telemetry endpoint: one read and one cap more.
    assert heartbeat_limit(gpu, None) == 10.0 + 6 * 300.0 + 30.0
    # A TelemetryProfile targeting the node still wins over the variables.
    assert heartbeat_limit(gpu, telemetry("t", "a", 2)) == 3 * 10.0 + 30.0


def test_a_node_whose_worker_keeps_dying_is_reported_crash_looping() -> None:
    with Loop() as loop:
        loop.change(Resource.TELEMETRY_PROFILES, telemetry("t-a", "a"), "ADDED")
        loop.change(Resource.TELEMETRY_PROFILES, telemetry("t-b", "b"), "ADDED")
        loop.nodes("a", "b")
        loop.turn()
        for worker in loop.launcher.started:
            worker.report()
        loop.turn()
        for death in range(1, 4):
            latest = loop.launcher.of("a")[-1]
            # The worker's last words, as run_worker sends them after a crash.
            latest.pipe.send(Stopped("a", (), "crashed: KeyError: 'spec'"))
            latest.process.exit(70)
            loop.turn()
            status = loop.status.last("a")
            assert status is not None
            assert ("crash-looping" in status.message) == (death >= 3), status.message
            loop.turn(loop.handle("a").restart_at - loop.clock.now + 0.01)
            assert len(loop.launcher.of("a")) == death + 1
        assert "crashed: KeyError: 'spec'" in status.message
        assert status.observed["failures"] == 3
        # The metrics say it too, while the worker is between attempts; its neighbour is fine.
        loop.launcher.of("a")[-1].process.exit(-11)  # no last words this time
        loop.turn()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(loop.supervisor.reporting.collector)
        value = registry.get_sample_value
        assert value("agentpool_worker_crash_looping", {"node": "a"}) == 1
        assert value("agentpool_worker_crash_looping", {"node": "b"}) == 0
        assert value("agentpool_worker_consecutive_failures", {"node": "a"}) == 4
        due = value("agentpool_worker_next_restart_timestamp_seconds", {"node": "a"})
        assert due is not None
        assert time.time() < due < time.time() + 60
        assert value("agentpool_worker_last_failure_info", {
            "node": "a", "reason": "died (killed by SIGSEGV)"}) == 1
        # Running again, it is not reported as failing any more.
        loop.turn(loop.handle("a").restart_at - loop.clock.now + 0.01)
        loop.launcher.of("a")[-1].report()
        loop.turn()
        assert value("agentpool_worker_crash_looping", {"node": "a"}) == 0


def fences_of(worker: Any) -> list[Fence]:
    found = []
    while worker.pipe.poll(0):
        message = worker.pipe.recv()
        if isinstance(message, Fence):
            found.append(message)
    return found


def test_a_static_pools_workers_get_a_silence_fence_renewed_while_the_loop_turns() -> None:
    with Loop(heartbeat_timeout_s=60.0) as loop:
        loop.nodes("a")
        loop.turn()
        (worker,) = loop.launcher.started
        (first,) = fences_of(worker)  # sent with the start
        assert first.times.write_until is None  # nobody else can own a static pool's node
        assert first.times.stop_at == pytest.approx(loop.clock.now + 60.0)
        loop.turn(20.0)
        assert fences_of(worker) == []  # two thirds left: nothing to say
        loop.turn(11.0)
        (renewed,) = fences_of(worker)  # less than half left
        assert renewed.times.stop_at == pytest.approx(loop.clock.now + 60.0)
        # A short HEARTBEAT_TIMEOUT does not make a busy loop's workers stop early.
    with Loop(heartbeat_timeout_s=2.0) as loop:
        loop.nodes("a")
        loop.turn()
        (first,) = fences_of(loop.launcher.started[0])
        assert first.times.stop_at == pytest.approx(loop.clock.now + 30.0)


# -- shrunk examples of tests/properties/test_wire.py, kept as regressions -------------------


def _write_raw(worker: Any, data: bytes) -> None:
    sock = socket.socket(fileno=worker.pipe.fileno())
    try:
        sock.sendall(data)
    finally:
        sock.detach()


@pytest.mark.parametrize(
    ("data", "said"),
    [
        # Connection.recv() raised UnpicklingError out of the loop: the supervisor stopped.
        (struct.pack("!i", 5) + b"\x00\x80\x04K\x00", "does not unpickle"),
        # A well-framed pickle of something else than a report was taken silently.
        (struct.pack("!i", 5) + pickle.dumps(0)[:5], "an unexpected message: int"),
        (struct.pack("!i", 2**31 - 1) + b"\x80\x05", "a frame of 2147483647 bytes"),
    ],
)
def test_a_corrupt_frame_stops_that_worker_and_the_loop_goes_on(
    data: bytes, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    with Loop() as loop:
        loop.nodes("a", "b")
        loop.turn()
        a, b = sorted(loop.launcher.started, key=lambda w: w.node)
        a.report()
        b.report()
        loop.turn()
        _write_raw(a, data)
        loop.turn()
        assert a.process.signals == ["SIGTERM"]
        assert loop.handle("a").stop_reason is StopReason.PROTOCOL
        assert said in caplog.text
        assert b.process.signals == []
        assert loop.handle("b").state is WorkerState.RUNNING
        loop.turn()  # the stand-in obeyed SIGTERM: it is reaped, and restarts after its backoff
        assert loop.handle("a").state is WorkerState.BACKOFF


def test_half_a_report_never_blocks_the_loop() -> None:
    # Connection.recv() waited for the rest of a frame that a hung worker never sends.
    with Loop() as loop:
        loop.nodes("a")
        loop.turn()
        (a,) = loop.launcher.started
        frame = bytes(ForkingPickler.dumps(TickReport("a", TickResult(
            Backend.RAPL, Result.APPLIED, "ok"), 0.1)))
        whole = struct.pack("!i", len(frame)) + frame
        _write_raw(a, whole[: len(whole) // 2])
        started = time.monotonic()
        loop.turn()
        assert time.monotonic() - started < 5.0
        assert loop.handle("a").state is WorkerState.STARTING  # nothing whole arrived yet
        _write_raw(a, whole[len(whole) // 2 :])
        loop.turn()
        assert loop.handle("a").state is WorkerState.RUNNING
