"""``agentpool demo``: the real command end to end (no TTY), Ctrl-C, and its view pieces.

The end-to-end runs start the real demo subprocess, which starts the real
agent subprocesses; nothing is faked. They are checked from the demo's output
only, as a newcomer would read it.
"""

from __future__ import annotations

import io
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from agentpool.demo.observe import NodeRow, ShardMetrics, Snapshot, parse_metrics
from agentpool.demo.scenario import plan_nodes
from agentpool.demo.timeline import FlipProfile, KillWorker, RemoveLabel, script
from agentpool.demo.view import HOME_CLEAR, Header, ShardInfo, TtyView, table
from agentpool.sim.envtest import EnvtestUnavailableError, find_assets

DEMO = [sys.executable, "-m", "agentpool", "demo"]
NODES = [f"kwok-node-{i}" for i in range(6)]


def _env() -> dict[str, str]:
    # The demo configures its agents itself; stray agent settings from the
    # developer's shell must not leak into them.
    return {k: v for k, v in os.environ.items() if not k.startswith(("POOL_", "AGENT_"))}


def _gone(pids: list[int], timeout: float) -> list[int]:
    """Pids still running after ``timeout`` (zombies count as gone)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("apiserver", ["emulator", "envtest"])
def test_demo_with_duration_shows_caps_restart_and_label_removal(
    tmp_path: Path, apiserver: str
) -> None:
    if apiserver == "envtest":
        try:
            find_assets()
        except EnvtestUnavailableError as exc:
            pytest.skip(str(exc))
    done = subprocess.run(
        [*DEMO, "--nodes", "6", "--duration", "15", "--apiserver", apiserver],
        cwd=tmp_path,
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "\x1b[" not in out  # no TTY: plain lines, no escape codes
    for node in NODES:
        assert re.search(rf"cap applied on {node}: \d+ W", out), node
    assert "caps applied on all 6 managed nodes" in out
    # The profile flip and its confirmation.
    flip = re.search(r"profile of (\S+) flipped eco -> performance \(cap 120 -> 200 W\)", out)
    assert flip
    assert f"new cap of {flip[1]} applied: 200 W" in out
    # The kill and the restart, with a new pid.
    kill = re.search(r"killing worker of (\S+) \(pid (\d+), shard \d\) with SIGKILL", out)
    assert kill
    back = re.search(rf"worker of {kill[1]} back \(pid (\d+), restarts 1\)", out)
    assert back
    assert back[1] != kill[2]
    # The label removal and the stopped worker; the final table shows it unmanaged.
    removed = re.search(r"removed label joulie.io/managed from (\S+)", out)
    assert removed
    assert f"worker of {removed[1]} stopped" in out
    final = out[out.index("final state") :]
    assert re.search(rf"^{removed[1]}\s+-\s.*\sunmanaged\s", final, re.MULTILINE)
    # With the chart's CRDs and defaults, every controlled node follows the profile API.
    controlled = re.findall(r"^kwok-node-\d+\s+\d\s+(\S+)\s", final, re.MULTILINE)
    assert controlled, final
    assert set(controlled) == {"profiles"}, final
    # Both shards ran, and stopped cleanly.
    assert len(re.findall(r"shard \d agent \(pid \d+\) exited with status 0", out)) == 2
    assert "timeline: 3/3 moments confirmed" in out
    assert "demo finished cleanly" in out


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_demo_on_the_nodetwin_api_with_percent_caps(tmp_path: Path) -> None:
    done = subprocess.run(
        [*DEMO, "--api", "nodetwin", "--nodes", "4", "--duration", "15", "--workdir", "w"],
        cwd=tmp_path,
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "caps applied on all 4 managed nodes" in out
    flip = re.search(
        r"profile of (\S+) flipped eco -> performance \(cap 48% -> 80% of max, 120 -> 200 W\)",
        out,
    )
    assert flip
    assert f"new cap of {flip[1]} applied: 200 W" in out
    assert "timeline: 3/3 moments confirmed" in out
    logs = "".join(p.read_text() for p in (tmp_path / "w").glob("shard-*.log"))
    # The chart's CRD set is served; each node follows its NodeTwin.
    assert "Joulie kinds watched (JOULIE_API=auto): nodepowerprofiles" in logs
    assert re.search(r"node kwok-node-0 follows the NodeTwin API \(NodeTwin 'kwok-node-0'", logs)
    assert "48% of max 250 W (telemetry cpu.packagePowerMaxWatts)" in logs


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ctrl_c_stops_agents_and_workers_cleanly(tmp_path: Path) -> None:
    lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
    seen: list[str] = []
    with subprocess.Popen(
        [*DEMO, "--nodes", "3", "--interval", "1s", "--duration", "0"],
        cwd=tmp_path,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        deadline = time.monotonic() + 60
        try:
            while not any("caps applied on all 3 managed nodes" in line for line in seen):
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                assert line is not None, "demo ended early:\n" + "".join(seen)
                seen.append(line)
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        while (line := lines.get(timeout=10)) is not None:
            seen.append(line)
        reader.join(10)
    out = "".join(seen)
    assert code == 0, out
    assert "stopping (received SIGINT)" in out
    assert len(re.findall(r"shard \d agent \(pid \d+\) exited with status 0", out)) == 2
    # Agents and every worker they ran are gone: nothing leaks past Ctrl-C.
    pids = [int(p) for p in re.findall(r"agent pid (\d+)", out)]
    pids += [int(p) for p in re.findall(r"worker pid (\d+)", out)]
    assert len(pids) >= 5
    assert _gone(pids, timeout=10) == []


# -- pieces, without processes ------------------------------------------------------------


def _row(node: str, **changes: object) -> NodeRow:
    values: dict[str, object] = {
        "node": node, "managed": True, "profile": "eco", "cap": 120.0, "shard": 1,
        "pid": 4242, "restarts": 0, "enforced": ("eco", 120.0), "backend": "rapl",
        "result": "applied", "message": "RAPL cap set to 120 W", "sim_cap": 120.0,
        "throttle_pct": 0.0, "power_w": 119.5, "api": "profiles",
    }
    values.update(changes)
    return NodeRow(**values)  # type: ignore[arg-type]


def test_script_picks_three_different_nodes_and_scales_to_duration() -> None:
    for count in (3, 6, 20):
        moments = script(plan_nodes(count, seed=0), duration_s=15)
        assert [type(m) for m in moments] == [FlipProfile, KillWorker, RemoveLabel]
        assert len({m.node for m in moments}) == 3
        assert all(0 < m.due_s < 15 for m in moments)
    flip = script(plan_nodes(6, seed=0), duration_s=None)[0]
    plan = {p.name: p for p in plan_nodes(6, seed=0)}[flip.node]
    assert plan.profile.value == "eco"
    assert not plan.rapl_locked  # so the simulator's own cap confirms the flip


def test_parse_metrics_reads_pids_restarts_and_caps() -> None:
    text = (
        'agentpool_worker_pid{node="a"} 101.0\n'
        'agentpool_worker_restarts_total{node="a"} 2.0\n'
        'joulie_policy_cap_watts{node="a",policy="eco"} 120.0\n'
        'agentpool_node_api{node="a",api="nodetwin"} 1.0\n'
        "agentpool_owned_nodes 1.0\n"
    )
    metrics = parse_metrics(text)
    assert metrics == ShardMetrics(
        True, {"a": 101}, {"a": 2}, {"a": ("eco", 120.0)}, {"a": "nodetwin"}
    )


def test_table_marks_unmanaged_nodes_and_pending_ones() -> None:
    snap = Snapshot(
        3.0,
        [
            _row("kwok-node-0"),
            _row("kwok-node-1", result="", pid=None, shard=None, restarts=None),
            _row("kwok-spare-0", managed=False, pid=None, shard=None, restarts=None, result=""),
        ],
        [ShardMetrics()],
    )
    lines = table(snap)
    assert lines[0].split() == [
        "NODE", "SHARD", "API", "PROFILE", "CAP", "BACKEND", "THROTTLE", "POWER", "RESULT", "PID",
        "RESTARTS",
    ]
    assert lines[1].split() == [
        "kwok-node-0", "1", "profiles", "eco", "120", "W", "rapl", "0", "%", "119.5", "W",
        "applied", "4242", "0",
    ]
    assert lines[2].split()[-3:] == ["pending", "-", "-"]
    assert lines[3].split()[-3:] == ["unmanaged", "-", "-"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_tty_view_redraws_in_place_and_keeps_the_whole_timeline() -> None:
    header = Header(6, 2, "2s", "http://api", "/tmp/kubeconfig", "http://power",
                    [ShardInfo(0, 10, "http://127.0.0.1:1/metrics")])
    out = _Terminal()
    view = TtyView(header, out)
    for i in range(200):  # more than any terminal has room for
        view.event(float(i), f"event {i}")
    snap = Snapshot(5.0, [_row("kwok-node-0")], [ShardMetrics(True, {"kwok-node-0": 4242})])
    view.tick(snap)
    view.tick(Snapshot(5.5, snap.rows, snap.shards))  # within a second: no redraw
    assert out.getvalue().count(HOME_CLEAR) == 1
    assert "http://127.0.0.1:1/metrics" in out.getvalue()
    view.close(snap)
    text = out.getvalue()
    assert text.count(HOME_CLEAR) == 2
    assert "[t+ 0.0s] event 0" in text[text.index("full timeline:") :]


def test_table_has_a_gpu_column_when_a_node_has_gpus() -> None:
    snap = Snapshot(
        3.0,
        [_row("kwok-node-0"), _row("kwok-node-3", gpu="4x250 W"), _row("n", gpu="4x- pending")],
        [ShardMetrics()],
    )
    lines = table(snap)
    assert lines[0].split()[-1] == "GPU"
    assert lines[1].split()[-1] == "-"  # a CPU-only node
    assert lines[2].split()[-2:] == ["4x250", "W"]
    assert lines[3].split()[-2:] == ["4x-", "pending"]
    assert plan_nodes(20, seed=0)[3].gpus == 4
    assert plan_nodes(20, seed=0)[4].gpus == 0
