"""The short soak: chaos against the real agent, then nothing lost, leaked or drifted.

The ten-minute version is ``python bench/soak.py`` (see docs/development.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_short_soak(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "soak.py"),
            "--nodes",
            "30",
            "--host-nodes",
            "4",
            "--duration",
            "25",
            "--settle",
            "60",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["ok"]
    assert report["lost"] == report["duplicated"] == report["drifted"] == []
    assert report["actions"]["kill_worker"] > 0
    assert report["actions"]["flap_label"] > 0
    files = [s["metrics_files"] for s in report["samples"]]
    assert max(files) <= 3 * 30 + 3, "metrics files must not grow with restarts"
    fds = [s["fds"] for s in report["samples"]]
    assert max(fds) - fds[0] < 40, f"supervisor descriptors grew: {fds}"
