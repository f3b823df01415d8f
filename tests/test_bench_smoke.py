"""The scale benchmark at N = 20, short intervals: every step runs, so it cannot rot.

The full run is ``python bench/scale.py`` (N = 100 and 1,000; see bench/README.md).
Goals are not asserted here either: only that the run completes and reports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentpool.sim.envtest import EnvtestUnavailableError, find_assets

ROOT = Path(__file__).resolve().parents[1]


def test_scale_benchmark_smoke_run(tmp_path: Path) -> None:
    report = tmp_path / "BENCHMARKS.md"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "scale.py"),
            "--nodes",
            "20",
            "--interval",
            "2",
            "--changes",
            "10",
            "--scrapes",
            "3",
            "--restarts",
            "20",
            "--output",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = report.read_text()
    assert "| quantity | goal (N=20) | N=20 | met |" in text
    assert "- machine: " in text
    assert "Python 3." in text
    table = {
        line.split("|")[1].strip(): line.split("|")[3].strip()
        for line in text.splitlines()
        if line.startswith("| ") and line.count("|") == 5
    }
    # Every step produced a number ('-' is what the table shows for a missing one).
    for label, value in table.items():
        assert value, label
        assert "-" not in value.split(" / "), (label, value)
    assert table["multiprocess files: at start / after 20 worker SIGKILLs"] == "60 / 60"
    assert table["control ticks per node per interval (~1)"] not in ("0.00", "-")


def test_dvfs_benchmark_smoke_run(tmp_path: Path) -> None:
    report = tmp_path / "BENCHMARKS.md"
    report.write_text("# Benchmarks\n\nkept\n")
    args = [sys.executable, str(ROOT / "bench" / "dvfs.py"), "--seeds", "3", "--output"]
    for _ in range(2):  # the second run replaces its section instead of appending another
        proc = subprocess.run(
            [*args, str(report)], capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    text = report.read_text()
    assert text.startswith("# Benchmarks\n\nkept\n")
    assert text.count("## `dvfs.py`") == 1
    rows = {
        (cells[1], cells[2]): cells[3:-1]
        for line in text.splitlines()
        if line.startswith("| ") and len(cells := [c.strip() for c in line.split("|")]) == 10
    }
    for curve in ("simulator", "steep", "flat"):
        for kind in ("joulie", "adaptive"):
            assert all(rows[(curve, kind)]), (curve, kind)
        # Seeded and deterministic, so this is no timing assertion: the adaptive
        # controller meets the goals on every curve.
        assert rows[(curve, "adaptive")][-1] == "yes", rows[(curve, "adaptive")]


def test_shutdown_benchmark_smoke_run() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "shutdown.py"), "--nodes", "10", "--interval", "2s"],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["nodes"] == 10
    assert result["statuses_agent_stopped"] == 10
    assert result["exit_code"] == 0


def test_memory_benchmark_smoke_run() -> None:
    # Host controls, 3 nodes, checkpoints at 0 and 6 s; the workers probe themselves.
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "memory.py"), "--nodes", "3", "--at", "0,0.1",
         "--backend", "host", "--probe"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines()
            if line.startswith("| ")}
    assert rows["0.1"].split("|")[2].strip() == "3"  # 3 workers at the last checkpoint
    for stage in ("fork", "setup", "tick1", "tick2"):
        assert rows[stage].split("|")[2].strip() == "3", stage  # each worker reported it


def test_tick_allocations_benchmark_smoke_run() -> None:
    for backend in ("host", "http"):
        proc = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "tick_allocations.py"), "--backend", backend,
             "--ticks", "30", "--warm", "10"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.startswith(f"{backend}: net growth over 30 ticks"), proc.stdout


def test_proctitle_benchmark_smoke_run() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "proctitle.py"), "--nodes", "3", "--rounds", "1",
         "--settle", "1"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| 1 | on | 3/3 |" in proc.stdout
    assert "| 1 | off (baseline) | 0/3 |" in proc.stdout


def test_events_benchmark_smoke_run() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "events.py"), "--nodes", "3", "--window", "3",
         "--flap", "3"],
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steady = next(line for line in proc.stdout.splitlines() if line.startswith("| steady"))
    assert "= **0.0 per node per hour**" in steady
    assert "| 1,000 nodes flipping every 20 s for an hour" in proc.stdout


def test_floor_benchmark_smoke_run(tmp_path: Path) -> None:
    # 3 nodes, host controls, one sleeping floor worker, memory at 0.2 and 0.3 minutes.
    report = tmp_path / "BENCHMARKS.md"
    report.write_text("# Benchmarks\n\nkept\n")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "floor.py"), "--nodes", "3", "--backend", "host",
         "--minutes", "0.2,0.3", "--cpu-window", "3", "--settle", "1", "--floor-workers", "1",
         "--wakes", "2", "--drain-events", "--output", str(report)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = report.read_text()
    assert text.startswith("# Benchmarks\n\nkept\n")
    rows = {
        cells[1]: cells[2:-1]
        for line in text.splitlines()
        if line.startswith("| ") and len(cells := [c.strip() for c in line.split("|")]) == 8
    }
    cpu = rows["CPU per node-tick, every process of the agent (ms)"]
    assert float(cpu[0]) > 0, cpu  # the agent's
    assert float(cpu[1]) > 0, cpu  # the floor's
    wake = rows["a process's sleep and wake-up alone (ms of CPU; a worker wakes for its timer "
                "and for its answer)"]
    assert float(wake[0]) > 0, wake
    for minute in ("0.2", "0.3"):
        pss = rows[f"median / p95 worker PSS at t+{minute} min (MiB)"]
        assert float(pss[0].split(" / ")[0]) > 0, pss  # the workers' median
        assert float(pss[1]) > 0, pss  # the sleeping worker's
    assert float(rows["node-ticks in the CPU window"][0]) >= 3
    # The supervisor's CPU by thread: its main thread (the process's own name) turned.
    assert float(rows["its thread `agentpool` (ms)"][0]) > 0, rows.keys()
    # It sleeps at most a loop period (0.5 s) at a time, so it woke in a 3 s window.
    assert float(rows["its main loop's wake-ups a second (the thread's voluntary switches)"][0]) > 0
    api = ("Kubernetes API requests in the CPU window, per node and minute (status heartbeats, "
           "Events)")
    assert float(rows[api][0]) >= 0
    pending = "Node events still to write as the window began (the start-up's, about one a " \
              "second; `event-recorder` above)"
    assert rows[pending][0] == "0"  # --drain-events waited for them
    assert float(rows["seconds waited for them first (`--drain-events`)"][0]) >= 0


def test_eventfloor_benchmark_smoke_run() -> None:
    try:
        find_assets()
    except EnvtestUnavailableError as exc:
        pytest.skip(str(exc))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "eventfloor.py"), "--nodes", "10", "--rate", "20",
         "--seconds", "1", "--rounds", "1", "--output", "-"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {
        cells[1]: cells[2:-1]
        for line in proc.stdout.splitlines()
        if line.startswith("| ") and len(cells := [c.strip() for c in line.split("|")]) == 7
    }
    for client in ("socket", "http.client", "kubernetes"):
        assert int(rows[client][0]) > 0, rows  # each Python client received the writes
        assert rows[client][3].endswith(" us"), rows


def test_readyab_benchmark_smoke_run() -> None:
    try:
        find_assets()
    except EnvtestUnavailableError as exc:
        pytest.skip(str(exc))
    # This checkout against itself: both sides start, get ready and are told.
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "readyab.py"), "--before", str(ROOT),
         "--nodes", "100", "--rounds", "1"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("- ")]
    assert [line.split(":")[0] for line in lines] == ["- before", "- this"], proc.stdout
    for line in lines:
        assert " ready " in line, line
        assert "(median " in line, line
