"""What a worker's process title costs in memory: the same pod with titles off, then on.

Runs the real agent (pool mode, one pod) over N simulated nodes twice, with
``AGENTPOOL_PROCTITLE=0`` (the baseline) and then with titles (the default),
alternating for ``--rounds`` pairs so that drift on a shared machine shows.
After the workers have ticked for ``--settle`` seconds it reads every worker
from the outside: PSS and USS (``smaps_rollup``) and the private dirty pages
of its ``[stack]`` mapping, where the argv memory a title is written into
lives. Prints a markdown table; nothing here is a pass/fail test.

    .venv/bin/python bench/proctitle.py --nodes 50 --rounds 2
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

from measure import MIB, agent_over_nodes, median, memory, process_tree

KIB = 1024


def stack_private_dirty(pid: int) -> float | None:
    """Private dirty bytes of the process's [stack] mapping (None: unreadable)."""
    try:
        with open(f"/proc/{pid}/smaps", encoding="utf-8", errors="replace") as f:
            inside = False
            for line in f:
                if line[0] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
                    inside = line.rstrip().endswith("[stack]")
                elif inside and line.startswith("Private_Dirty:"):
                    return float(line.split()[1]) * KIB
    except OSError:
        return None
    return None


def measure(nodes: int, titles: bool, settle: float, interval: str) -> dict[str, float]:
    env = {"RECONCILE_INTERVAL": interval, "AGENTPOOL_PROCTITLE": "1" if titles else "0"}
    with agent_over_nodes(nodes, "http", env) as agent:
        time.sleep(settle)  # ticks, not synchronisation: the workers settle into their pages
        workers = process_tree(agent.pid).workers
        mem = memory(workers)
        stacks = [s for w in workers if (s := stack_private_dirty(w.pid)) is not None]
        named = sum(1 for w in workers if w.name().startswith("ap:"))
    result = {"workers": float(len(workers)), "named": float(named),
              "pss": median(mem.pss), "uss": median(mem.uss), "stack": median(stacks)}
    print(f"  titles {'on ' if titles else 'off'}: {len(workers)} workers ({named} named), "
          f"median PSS {result['pss'] / MIB:.3f} MiB, USS {result['uss'] / MIB:.3f} MiB, "
          f"[stack] private dirty {result['stack'] / KIB:.0f} KiB", file=sys.stderr)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2, help="pairs of runs (off, on)")
    parser.add_argument("--settle", type=float, default=20.0,
                        help="seconds of ticking before the workers are read")
    parser.add_argument("--interval", default="1s", help="RECONCILE_INTERVAL")
    args = parser.parse_args(argv)
    rows = []
    for round_ in range(args.rounds):
        off = measure(args.nodes, False, args.settle, args.interval)
        on = measure(args.nodes, True, args.settle, args.interval)
        rows.append((round_ + 1, off, on))
    print(f"### Process titles, N = {args.nodes} workers, RECONCILE_INTERVAL={args.interval}, "
          f"read after {args.settle:g} s\n")
    print("| round | titles | named workers | median PSS (KiB) | median USS (KiB) "
          "| [stack] private dirty (KiB) |")
    print("|---|---|---|---|---|---|")
    for round_, off, on in rows:
        for label, r in (("off (baseline)", off), ("on", on)):
            print(f"| {round_} | {label} | {r['named']:.0f}/{r['workers']:.0f} | "
                  f"{r['pss'] / KIB:.0f} | {r['uss'] / KIB:.0f} | {r['stack'] / KIB:.0f} |")
    deltas = [on["uss"] - off["uss"] for _, off, on in rows]
    noise = [abs(a["uss"] - b["uss"]) for (_, a, _), (_, b, _) in itertools.pairwise(rows)]
    print("\nUSS per worker, titles on minus off: "
          + ", ".join(f"{d / KIB:+.0f} KiB" for d in deltas)
          + ("; between baseline rounds: " + ", ".join(f"{n / KIB:.0f} KiB" for n in noise)
             if noise else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
