"""Process titles: the names ps, top and /proc give the supervisor, fork server and workers."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import psutil

from agentpool import proctitle
from agentpool.proctitle import argv_area, comm_for, name_thread
from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until
from agentpool.supervisor.forkclient import SERVER_MODULE


def comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
        return f.read().rstrip("\n")


def cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


def titled(pid: int, node: str) -> bool:
    """Whether a worker's title and name are its node's."""
    return cmdline(pid) == f"agentpool: node {node}\0".encode() and comm(pid) == comm_for(node)


def test_comm_keeps_what_tells_nodes_apart_in_15_bytes() -> None:
    assert comm_for("kwok-node-17") == "ap:kwok-node-17"
    assert comm_for("ip-10-0-12-34.eu-west-1.compute.internal") == "ap:~-10-0-12-34"
    assert comm_for("aks-nodepool1-12345678-vmss000003") == "ap:~-vmss000003"
    for name in ("x" * 300, "é" * 20, "a.b"):
        assert len(comm_for(name).encode()) <= 15


def test_the_argv_area_is_read_after_a_comm_with_spaces_and_parentheses() -> None:
    fields = ["S"] + ["0"] * 44 + ["1000", "1200"] + ["0"] * 5
    stat = "42 (a (weird) name) " + " ".join(fields)
    assert argv_area(stat) == (1000, 1200)
    assert argv_area("garbage") is None


SCRIPT = """
import os, sys
from agentpool.proctitle import enable, set_title
enable(os.environ.get("ENABLE", "1") == "1")
ok = set_title(os.environ["TITLE"], os.environ["COMM"])
sys.stdout.write(f"{ok}\\n")
sys.stdout.flush()
sys.stdin.read()
"""


def renamed(title: str, name: str, **env: str) -> tuple[str, bytes, str]:
    """Run a process that renames itself; (its answer, its cmdline, its comm) from outside."""
    with subprocess.Popen(
        [sys.executable, "-c", SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env={**os.environ, "TITLE": title, "COMM": name, **env},
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdin is not None
        answer = proc.stdout.readline().strip()
        seen = cmdline(proc.pid), comm(proc.pid)
        proc.stdin.close()
        proc.wait(10)
    return answer, *seen


def test_a_process_renames_itself_as_ps_shows_it() -> None:
    answer, line, name = renamed("agentpool: node n-1", "ap:n-1")
    assert answer == "True"
    assert line == b"agentpool: node n-1\0"
    assert name == "ap:n-1"


def test_a_title_longer_than_the_argv_memory_is_cut_never_spilled() -> None:
    answer, line, _ = renamed("agentpool: node " + "x" * 5000, "ap:x")
    assert answer == "True"
    assert line.startswith(b"agentpool: node xxx")
    assert line.endswith(b"x\0")
    # As long as the original command line, not one byte more.
    original = len(sys.executable) + len(" -c ") + len(SCRIPT) + 1
    assert len(line) <= original


def thread_comms(pid: int) -> set[str]:
    names = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8") as f:
                names.add(f.read().rstrip("\n"))
        except OSError:
            continue  # the thread ended meanwhile
    return names


def named_in_thread(name: str, given: str | None = None) -> tuple[bool, str]:
    """Start a thread called ``name`` that names itself; what it returned, what the kernel
    calls it."""
    seen: list[tuple[bool, str]] = []

    def run() -> None:
        done = name_thread(given)
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", encoding="utf-8") as f:
            seen.append((done, f.read().rstrip("\n")))

    thread = threading.Thread(target=run, name=name)
    thread.start()
    thread.join()
    return seen[0]


def test_a_thread_gets_its_python_name_in_the_kernel_cut_to_15_bytes() -> None:
    assert named_in_thread("event-recorder") == (True, "event-recorder")
    assert named_in_thread("informer-telemetryprofiles") == (True, "informer-teleme")
    assert named_in_thread("Thread-3", "metrics-request") == (True, "metrics-request")
    assert comm(os.getpid()) != "event-recorder"  # the process keeps its own name


def test_disabled_titles_leave_thread_names_alone() -> None:
    proctitle.enable(False)
    try:
        done, name = named_in_thread("event-recorder")
    finally:
        proctitle.enable(True)
    assert not done
    assert name != "event-recorder"


def test_disabled_titles_leave_the_names_alone() -> None:
    answer, line, name = renamed("agentpool: node n-1", "ap:n-1", ENABLE="0")
    assert answer == "False"
    assert line.split(b"\0")[:2] == [sys.executable.encode(), b"-c"]
    assert name != "ap:n-1"


def test_real_workers_the_fork_server_and_the_supervisor_say_what_they_are() -> None:
    nodes = ["kwok-node-17", "ip-10-0-12-34.eu-west-1.compute.internal"]
    with SimCluster() as cluster:
        for node in nodes:
            cluster.add_node(node)
        agent = cluster.start_agent()
        agent.wait_ready(30)
        pids = wait_until(lambda: p if len(p := agent.worker_pids()) == len(nodes) else None, 30)
        for node, pid in pids.items():
            # The fork server answers with the pid as soon as it forked; the worker names
            # itself a moment later, as it starts (the pid can be published before that).
            wait_until(lambda pid=pid, node=node: titled(pid, node), 10)  # type: ignore[misc]
            assert psutil.Process(pid).name() == comm_for(node)
        # The supervisor's title fits in the argv it was started with ([python, -m,
        # agentpool], NUL-separated, one byte kept for the rewrite mark): a short interpreter
        # path (a venv near /) cuts it.
        room = len(sys.executable) + len(" -m agentpool") - 1
        title = b"agentpool: supervisor (pool, shard 0 of 1)"
        assert cmdline(agent.pid) == title[:room] + b"\0"
        assert comm(agent.pid) == "agentpool"
        (server,) = [c for c in psutil.Process(agent.pid).children()
                     if SERVER_MODULE in " ".join(c.cmdline())]
        assert cmdline(server.pid) == f"agentpool: fork server ({SERVER_MODULE})\0".encode()
        assert comm(server.pid) == "ap:forkserver"
        # Its threads too (top -H, ps -L): where the supervisor's CPU goes, without a profiler.
        expected = {"informer-nodes", "informer-teleme", "status-writer", "event-recorder",
                    "psutil", "metrics-http", "nodehardware"}
        assert expected <= thread_comms(agent.pid), thread_comms(agent.pid)
        assert agent.terminate() == 0


def test_agentpool_proctitle_false_leaves_every_process_and_thread_as_it_was() -> None:
    # The switch reaches the supervisor from its environment, the fork server on its
    # command line, and the workers from the fork server.
    with SimCluster() as cluster:
        cluster.add_node("kwok-node-1")
        agent = cluster.start_agent({"AGENTPOOL_PROCTITLE": "false"})
        agent.wait_ready(30)
        (pid,) = wait_until(lambda: p if len(p := agent.worker_pids()) == 1 else None,
                            30).values()
        (server,) = [c for c in psutil.Process(agent.pid).children()
                     if SERVER_MODULE in " ".join(c.cmdline())]
        python = os.path.basename(sys.executable)[:15]  # as the kernel names what it runs
        assert comm(agent.pid) == python
        assert comm(server.pid) == python
        assert comm(pid) == python
        assert cmdline(pid).startswith(sys.executable.encode() + b"\0-m\0" + SERVER_MODULE.encode())
        assert not {"informer-nodes", "status-writer", "metrics-http"} & thread_comms(agent.pid)
        assert agent.terminate() == 0
