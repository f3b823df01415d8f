"""A long search over every property: rounds of the suites with fresh seeds, until time is up.

Run by ``bash scripts/fuzz [MINUTES] [pytest arguments]``. Each round runs
``pytest tests/properties`` under the ``campaign`` Hypothesis profile
(tests/support/budget.py: 25 times each property's CI budget, random,
failures kept in ``.hypothesis/``) with a seed of its own, so the rounds
explore different inputs. It prints, and writes to
``.hypothesis/campaign/report.txt``, how many examples each property ran in
all, how long it took, and every failure, whose whole output is kept in
``.hypothesis/campaign/round-N.log``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / ".hypothesis" / "campaign"
_TEST = re.compile(r"^(tests/properties/\S+::\S+):$")
_PHASE = re.compile(r"^\s+- during (\w+) phase \(([\d.]+) seconds\):")
_COUNTS = re.compile(r"^\s+- (\d+) passing, (\d+) failing, and (\d+) invalid test cases")


@dataclass
class Tally:
    examples: int = 0
    """Examples generated (passing and failing; invalid ones are not examples)."""
    shrinks: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)


def parse(output: str, tallies: dict[str, Tally], round_no: int) -> None:
    test, phase = None, None
    for line in output.splitlines():
        if match := _TEST.match(line):
            test = match.group(1)
            continue
        if test is None:
            continue
        if match := _PHASE.match(line):
            phase = match.group(1)
            tallies[test].seconds += float(match.group(2))
        elif (match := _COUNTS.match(line)) and phase is not None:
            passing, failing = int(match.group(1)), int(match.group(2))
            if phase == "shrink":
                tallies[test].shrinks += passing + failing
            else:
                tallies[test].examples += passing + failing
                if failing:
                    tallies[test].failures.append(f"round {round_no}: {failing} failing")


def report(tallies: dict[str, Tally], rounds: int, elapsed: float) -> str:
    lines = [f"{rounds} round(s), {elapsed / 60:.1f} minutes", ""]
    width = max((len(t) for t in tallies), default=10)
    lines.append(f"{'property':<{width}}  examples  shrinks  seconds  failures")
    for test in sorted(tallies):
        t = tallies[test]
        failed = "; ".join(t.failures) or "none"
        counts = f"{t.examples:>8}  {t.shrinks:>7}  {t.seconds:>7.0f}"
        lines.append(f"{test:<{width}}  {counts}  {failed}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("minutes", nargs="?", type=float, default=60.0)
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AGENTPOOL_HYPOTHESIS_PROFILE": "campaign"}
    tallies: dict[str, Tally] = defaultdict(Tally)
    started = time.monotonic()
    deadline = started + args.minutes * 60
    rounds, failed = 0, False
    while time.monotonic() < deadline:
        rounds += 1
        seed = random.randrange(2**32)
        command = [
            sys.executable, "-m", "pytest", "tests/properties", "-q", "-p", "no:cacheprovider",
            "--timeout=7200", "--hypothesis-show-statistics", f"--hypothesis-seed={seed}",
            "-W", "ignore::hypothesis.errors.HypothesisWarning", *args.pytest_args,
        ]  # fmt: skip
        print(f"round {rounds} (seed {seed}): {' '.join(command[2:])}", flush=True)
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        log = OUT / f"round-{rounds}.log"
        log.write_text(done.stdout + done.stderr)
        parse(done.stdout, tallies, rounds)
        if done.returncode != 0:
            failed = True
            print(f"round {rounds} FAILED (exit {done.returncode}): see {log}", flush=True)
        text = report(tallies, rounds, time.monotonic() - started)
        (OUT / "report.txt").write_text(text)
        print(text, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
