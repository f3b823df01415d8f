"""The lean fork server with real workers: exit codes, a dead server, stopping it."""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection, Pipe, wait
from pathlib import Path

import psutil
import pytest

from agentpool.config.settings import DiagnosticsSettings, Settings
from agentpool.resources.nodeinputs import NodeInputs
from agentpool.sim import workerfaults
from agentpool.sim.polling import wait_until
from agentpool.sim.throttle import SlowForks
from agentpool.supervisor.forkclient import (
    DISCARD_WAIT_S,
    KILL_WAIT_S,
    LOST_EXIT_CODE,
    MAX_BATCH,
    SERVER_MODULE,
    SPAWN_TIMEOUT_S,
    Deferred,
    ForkedWorker,
    ForkServer,
    SpawnRequest,
)
from agentpool.supervisor.orphans import spare_pids
from agentpool.worker.forking.descriptors import close_all
from agentpool.worker.forking.wire import HEADER
from agentpool.worker.main import EXIT_CRASH
from agentpool.worker.protocol import Stopped, StopWorker, TickReport
from tests.support.forking import LATE_ANSWER_S, widen_late_answers

DEADLINE_S = 30.0
"""A worker forks and ticks in well under a second here; 30 s is for a loaded CI box."""



def spawn(
    server: ForkServer, node: str, interval_s: float = 0.2
) -> tuple[ForkedWorker, Connection]:
    ours, theirs = Pipe(duplex=True)
    try:
        settings = Settings(reconcile_interval_s=interval_s).worker()
        worker = server.spawn(node, settings, None, None, theirs.fileno())
    finally:
        theirs.close()
    return worker, ours


def first_report(conn: Connection) -> TickReport:
    assert conn.poll(DEADLINE_S)
    report = conn.recv()
    assert isinstance(report, TickReport)
    return report


def exit_code(worker: ForkedWorker) -> int:
    ready = wait([worker.sentinel], DEADLINE_S)
    assert ready, "the sentinel never fired"
    code = worker.exitcode
    assert code is not None
    return code


def test_a_worker_ticks_and_its_exit_status_comes_back(server: ForkServer) -> None:
    worker, conn = spawn(server, "n1")
    assert first_report(conn).node == "n1"
    assert worker.exitcode is None
    assert psutil.Process(worker.pid).ppid() == server.pid
    conn.send(StopWorker())
    assert exit_code(worker) == 0
    assert isinstance(conn.recv(), Stopped)
    worker.close()

    killed, conn2 = spawn(server, "n2")
    first_report(conn2)
    killed.kill()
    assert exit_code(killed) == -signal.SIGKILL
    killed.close()
    # The server reaped both: no zombie left behind under it.
    assert psutil.Process(server.pid).children() == []


def test_a_batch_of_spawns_forks_every_worker_in_order(server: ForkServer) -> None:
    settings = Settings(reconcile_interval_s=0.2).worker()
    pipes = [Pipe(duplex=True) for _ in range(5)]
    requests = [SpawnRequest(f"b{i}", settings, None, None, theirs.fileno())
                for i, (_, theirs) in enumerate(pipes)]
    try:
        results = server.spawn_many(requests)
    finally:
        for _, theirs in pipes:
            theirs.close()
    workers = [r for r in results if isinstance(r, ForkedWorker)]
    assert len(workers) == 5
    assert len({w.pid for w in workers}) == 5
    for i, (worker, (ours, _)) in enumerate(zip(workers, pipes, strict=True)):
        assert first_report(ours).node == f"b{i}"  # each answer is its own request's worker
        worker.terminate()
        assert exit_code(worker) == 0
        worker.close()
    assert psutil.Process(server.pid).children() == []


def test_the_servers_descriptors_are_closed_in_a_worker(server: ForkServer) -> None:
    # Five workers hold status pipes in the server; the sixth inherits none of them,
    # nor the server's socket, wake pipe or epoll descriptor: only stdio and its pipe.
    first = [spawn(server, f"d{i}") for i in range(5)]
    worker, conn = spawn(server, "d5")
    first_report(conn)
    pid = worker.pid
    assert pid is not None
    fds = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    server_fds = {os.readlink(f"/proc/{server.pid}/fd/{fd}")
                  for fd in os.listdir(f"/proc/{server.pid}/fd")} - {
        os.readlink(f"/proc/{server.pid}/fd/{fd}") for fd in (0, 1, 2)}
    assert server_fds
    assert not fds & server_fds
    for w, _ in [*first, (worker, conn)]:
        w.terminate()
        exit_code(w)
        w.close()


def test_close_all_closes_runs_and_nothing_between() -> None:
    fds = [fd for _ in range(4) for fd in os.pipe()]
    keep = fds[3]
    close_all([fd for fd in fds if fd != keep] + [fds[0]])  # a duplicate is fine
    os.fstat(keep)  # still open
    for fd in fds:
        if fd != keep:
            with pytest.raises(OSError, match="Bad file descriptor"):
                os.fstat(fd)
    os.close(keep)


def test_a_dead_fork_server_takes_its_workers_and_is_replaced(server: ForkServer) -> None:
    worker, conn = spawn(server, "n1")
    first_report(conn)
    old = server.pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    # The status pipe closes with the server: reported as lost, like multiprocessing did.
    assert exit_code(worker) == LOST_EXIT_CODE
    # The worker itself follows on its parent-death signal.
    pid = worker.pid
    assert pid is not None
    wait_until(lambda: not psutil.pid_exists(pid) or _zombie(pid), DEADLINE_S)
    # The next spawn starts a new server, which is not ready at once: no spawn waits for it.
    requests = [SpawnRequest(f"n{i}", Settings().worker(), None, None, -1) for i in range(3)]
    deferred = server.spawn_many(requests)
    assert [type(d) for d in deferred] == [Deferred] * 3
    with pytest.raises(OSError, match="still starting"):
        spawn(server, "n1")
    assert server.wait_ready(60.0)
    again, conn2 = spawn(server, "n1")
    assert server.pid != old
    first_report(conn2)
    again.terminate()
    assert exit_code(again) == 0  # SIGTERM: restores the host, exits cleanly


def test_stop_ends_the_server(server: ForkServer) -> None:
    pid = server.pid
    assert pid is not None
    server.stop()
    assert server.pid is None
    assert not psutil.pid_exists(pid)  # reaped, not a zombie


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_stuck_fork_server_cannot_stall_a_spawn_and_is_replaced(server: ForkServer) -> None:
    # A server that stops answering (here SIGSTOP; a fork that never returns looks the
    # same): the spawn gives up within its timeout instead of waiting forever, and the
    # server is killed so that a new one takes over.
    old = server.pid
    assert old is not None
    os.kill(old, signal.SIGSTOP)
    try:
        began = time.monotonic()
        with pytest.raises(OSError, match="no answer within"):
            spawn(server, "n1")
        assert time.monotonic() - began < 5 * SPAWN_TIMEOUT_S
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(old, signal.SIGCONT)
    wait_until(lambda: not psutil.pid_exists(old) or _zombie(old), DEADLINE_S)
    assert server.wait_ready(60.0)
    assert server.pid != old
    worker, conn = spawn(server, "n1")
    first_report(conn)
    worker.terminate()
    assert exit_code(worker) == 0


def batch(server: ForkServer, count: int) -> tuple[list[ForkedWorker | OSError | Deferred],
                                                  float, list[Connection]]:
    """Ask for ``count`` workers in one batch: the results, how long it took, and the
    supervisor's ends of their pipes."""
    settings = Settings(reconcile_interval_s=5.0).worker()
    pipes = [Pipe(duplex=True) for _ in range(count)]
    requests = [SpawnRequest(f"s{i}", settings, None, None, theirs.fileno())
                for i, (_, theirs) in enumerate(pipes)]
    began = time.monotonic()
    try:
        results = server.spawn_many(requests)
    finally:
        for _, theirs in pipes:
            theirs.close()
    return results, time.monotonic() - began, [ours for ours, _ in pipes]


def stop_all(results: list[ForkedWorker | OSError | Deferred], pipes: list[Connection]) -> None:
    for worker in results:
        if isinstance(worker, ForkedWorker):
            worker.terminate()
            exit_code(worker)
            worker.close()
    for conn in pipes:
        conn.close()


def test_a_batch_larger_than_the_socket_takes_is_cut_to_its_first_requests(
    server: ForkServer,
) -> None:
    results, _, pipes = batch(server, MAX_BATCH + 2)
    assert [type(r) for r in results[MAX_BATCH:]] == [Deferred, Deferred]
    assert all("more than 64 starts at once" in r.why for r in results[MAX_BATCH:]
               if isinstance(r, Deferred))
    assert any(isinstance(r, ForkedWorker) for r in results[:MAX_BATCH])
    stop_all(results, pipes)


def test_a_server_that_comes_back_after_the_deadline_forks_nothing_late(
    server: ForkServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stopped through the batch's deadline, then running again: every request is answered
    # at once, without a fork (the supervisor no longer waits for it), and the server
    # stays, serving the next batch.
    widen_late_answers(monkeypatch)  # the server is resumed by a timer: see the helper
    pid = server.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    # A quarter of the window past the deadline (the batch begins a moment after the timer).
    resume = threading.Timer(SPAWN_TIMEOUT_S + LATE_ANSWER_S / 4,
                             lambda: os.kill(pid, signal.SIGCONT))
    resume.start()
    try:
        results, took, pipes = batch(server, 16)
    finally:
        resume.join()
    assert [type(r) for r in results] == [Deferred] * 16, results
    assert all("after its batch's 2s deadline" in r.why for r in results
               if isinstance(r, Deferred))
    assert took < SPAWN_TIMEOUT_S + LATE_ANSWER_S
    assert psutil.Process(pid).children() == []
    stop_all(results, pipes)
    results, _, pipes = batch(server, 4)
    assert server.pid == pid
    assert [type(r) for r in results] == [ForkedWorker] * 4
    stop_all(results, pipes)


def test_a_slow_fork_server_cannot_hold_a_batch_past_its_bound(
    server: ForkServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fork takes 0.3 s: every answer comes well within a timeout per answer, and 64 of
    # them took about 20 s. With one deadline the batch returns by its bound, the workers
    # forked by then started and the others deferred; the server, slow but not stuck, stays.
    bound = widen_late_answers(monkeypatch)  # resumed by SlowForks' thread: see the helper
    pid = server.pid
    assert pid is not None
    with SlowForks(pid, period_s=0.3):
        results, took, pipes = batch(server, 64)
    assert took < bound + 1.0, took
    forked = [r for r in results if isinstance(r, ForkedWorker)]
    assert 0 < len(forked) < 64
    assert [type(r) for r in results[len(forked):]] == [Deferred] * (64 - len(forked))
    assert server.pid == pid
    stop_all(results, pipes)


class UnkillableServer(ForkServer):
    """A fork server SIGKILL does not end at once. Stands in for a process in
    uninterruptible sleep (a hung driver or NFS call), which cannot be made here on demand:
    the server is SIGSTOPped (it ignores the closed socket) and the SIGKILL is not sent."""

    def _kill(self, process: subprocess.Popen[bytes]) -> None:
        self.killed = process.pid


def test_a_server_sigkill_does_not_end_is_not_waited_for_and_is_reaped_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    server = UnkillableServer()
    assert server.wait_ready(60.0)
    pid = server.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        server.stop(timeout=DISCARD_WAIT_S)
        assert time.monotonic() - began < DISCARD_WAIT_S + KILL_WAIT_S + 1.0
        assert server.killed == pid
        assert pid in spare_pids  # still ours to reap: the PID 1 reaper leaves it alone
        assert psutil.Process(pid).status() == psutil.STATUS_STOPPED
    finally:
        os.kill(pid, signal.SIGKILL)  # the uninterruptible call returns: it dies
    wait_until(lambda: _zombie(pid), DEADLINE_S)
    server.stop()  # any later call of the client reaps it
    assert not psutil.pid_exists(pid)
    assert pid not in spare_pids


def test_the_ready_message_carries_the_preload_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    fresh = ForkServer(DiagnosticsSettings(immortalize=False))
    with caplog.at_level(logging.INFO, logger="agentpool.supervisor.forkclient"):
        try:
            assert fresh.wait_ready(60.0)
        finally:
            fresh.stop()
    lines = [r.getMessage() for r in caplog.records]
    assert any("warm-up: every tick path taken" in line for line in lines), lines
    packed = "code packing: the " if sys.version_info >= (3, 12) else "code packing skipped: "
    assert any(packed in line for line in lines), lines
    assert any("holes filled: " in line for line in lines), lines
    assert any("immortal heap skipped: AGENTPOOL_IMMORTALIZE=false" in line for line in lines)
    assert any("heap frozen" in line for line in lines)


# -- shrunk examples of tests/properties/test_wire.py, kept as regressions -------------------


def test_sigterm_ends_a_worker_waiting_for_its_next_tick_at_once(server: ForkServer) -> None:
    # The handler only records SIGTERM; the wait on the pipe, retried after a signal, went
    # on until the next tick (here a minute away; exit_code waits half of that).
    worker, ours = spawn(server, "n1", interval_s=60.0)
    first_report(ours)
    worker.terminate()
    assert exit_code(worker) == 0
    worker.close()


def test_a_frame_cut_short_leaves_the_worker_able_to_stop(server: ForkServer) -> None:
    # b'\x00\x00\x00d\x80\x05': a frame announcing 100 bytes, 2 sent. Connection.recv()
    # waited for the rest, and SIGTERM could not end it (only SIGKILL, host not restored).
    worker, ours = spawn(server, "n1", interval_s=60.0)
    first_report(ours)
    sock = socket.socket(fileno=ours.fileno())
    try:
        sock.sendall(b"\x00\x00\x00d\x80\x05")
    finally:
        sock.detach()
    worker.terminate()
    assert exit_code(worker) == 0
    worker.close()


def test_a_corrupt_frame_ends_the_worker_through_its_crash_path(server: ForkServer) -> None:
    worker, conn = spawn(server, "n1")
    first_report(conn)
    sock = socket.socket(fileno=conn.fileno())
    try:
        sock.sendall(struct.pack("!i", 5) + b"\x00\x80\x04K\x00")
    finally:
        sock.detach()
    assert exit_code(worker) == EXIT_CRASH
    worker.close()


def test_a_request_that_is_not_a_workers_arguments_ends_the_server_quietly(
    tmp_path: Path,
) -> None:
    # pickle.dumps(0) with both descriptors: tuple(0) raised TypeError and the server died
    # with a traceback (the supervisor then started another, but said nothing of why).
    ours, theirs = socket.socketpair()
    with open(tmp_path / "stderr", "wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE, str(theirs.fileno())],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stderr=err,
        )
    theirs.close()
    r, w = os.pipe()
    try:
        payload = pickle.dumps(0)
        socket.send_fds(ours, [HEADER.pack(len(payload), time.monotonic() + 60)], [r, w])
        ours.sendall(payload)
        assert process.wait(DEADLINE_S) == 0
        assert (tmp_path / "stderr").read_text() == ""
    finally:
        ours.close()
        os.close(r)
        os.close(w)
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_crashing_worker_says_why_and_with_which_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A crash an input causes must not become a crash loop nobody can explain: the worker's
    # last message names the exception and the desired state it was enforcing, and the
    # supervisor logs it with the death (and puts it in the status and metrics).
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    fork_server = ForkServer(DiagnosticsSettings(
        worker_hook=workerfaults.hook_spec("raise-in-tick:n1")))
    try:
        assert fork_server.wait_ready(60.0)
        ours, theirs = Pipe(duplex=True)
        profile = {"metadata": {"name": "n1-eco", "resourceVersion": "42"},
                   "spec": {"nodeName": "n1", "profile": "eco"}}
        try:
            worker = fork_server.spawn("n1", Settings(reconcile_interval_s=0.2).worker(), None,
                                       NodeInputs("n1", power_profile=profile), theirs.fileno())
        finally:
            theirs.close()
        assert exit_code(worker) == EXIT_CRASH
        stopped = ours.recv()
        assert isinstance(stopped, Stopped)
        assert stopped.reason.startswith("crashed: InjectedFault: ")
        assert stopped.reason.endswith("with NodePowerProfile 'n1-eco' (resourceVersion '42')")
        worker.close()
    finally:
        fork_server.stop()
