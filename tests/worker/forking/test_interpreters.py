"""The one gate of the fork server's heap layout (worker/forking/interpreters.py)."""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentpool.worker.forking import allocator, codepack, immortal, interpreters
from agentpool.worker.forking.interpreters import TESTED, Step

REPO = Path(__file__).resolve().parents[3]


def test_every_step_runs_only_on_the_versions_it_was_tested_on() -> None:
    for step in Step:
        for version in [(3, 10), (3, 11), (3, 12), (3, 13), (3, 14), (4, 0)]:
            why = interpreters.unsupported(step, version)
            if step in TESTED.get(version, frozenset()):
                # The build's own reasons only (the suite runs on 64-bit CPython, GIL).
                assert why is None, (step, version, why)
            else:
                assert why == (f"Python {version[0]}.{version[1]} is not one it was tested "
                               f"on ({', '.join(interpreters.tested_on(step))})"), why


def test_the_gate_admits_exactly_what_setup_cfg_claims_and_the_scripts_run_on() -> None:
    # A version is admitted only where CI runs the whole suite: the one setup.cfg's
    # classifiers name, which scripts/check (CI's command) finds and makes its venv from.
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    claimed = re.findall(r"Programming Language :: Python :: (3\.\d+)",
                         config["metadata"]["classifiers"])
    assert claimed == [f"{major}.{minor}" for major, minor in TESTED]
    finder = (REPO / "scripts" / "python.sh").read_text()
    for major, minor in TESTED:
        assert f"sys.version_info[:2] != ({major}, {minor})" in finder
    for step in Step:
        assert interpreters.tested_on(step) == claimed


def test_each_step_asks_the_gate() -> None:
    # On whatever interpreter runs the suite, each module says what the gate says.
    assert codepack.unsupported() == interpreters.unsupported(Step.PACK_CODE)
    assert (immortal.unsupported() is None) == (
        interpreters.unsupported(Step.IMMORTALIZE) is None)
    assert allocator.unsupported() == interpreters.unsupported(Step.FILL_HOLES)


def test_the_running_interpreter_is_a_tested_one() -> None:
    assert sys.version_info[:2] in TESTED


@pytest.mark.parametrize("step", list(Step))
def test_a_step_skipped_says_so_in_the_fork_servers_report(step: Step) -> None:
    # What a Python nobody tested gets: each step's line says it was skipped and why,
    # and the fork server still freezes its heap and serves.
    script = f"""
import sys
from agentpool.worker.forking import interpreters
real = interpreters.unsupported
interpreters.unsupported = lambda step, version=None: (
    real(step, (3, 99)) if step is interpreters.Step.{step.name} else real(step, version))
from agentpool.config.settings import DiagnosticsSettings
from agentpool.worker.forking import preload
print("\\n".join(preload.prepare(DiagnosticsSettings())))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    why = "Python 3.99 is not one it was tested on"
    prefix = {
        Step.PACK_CODE: "code packing skipped: ",
        Step.IMMORTALIZE: "immortal heap skipped: ",
        Step.FILL_HOLES: "holes left as they are: ",
    }[step]
    assert any(line.startswith(prefix + why) for line in out.stdout.splitlines()), out.stdout
    assert out.stdout.splitlines()[-1].startswith("heap frozen: ")
