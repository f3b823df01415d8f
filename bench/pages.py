"""Which of a worker's pages are its own, and why: page by page, against the fork server.

Runs the real agent over N simulated nodes, lets the workers tick, then takes
the median worker and reads ``/proc/<pid>/pagemap``: a page is the worker's
own (counted in its USS) when it is present and mapped by this process only.
For each such page of the anonymous memory and the heap it compares the
worker's bytes with the fork server's at the same address
(``/proc/<pid>/mem``):

- *identical*: the page was copied but holds what the fork server holds, so
  the write that copied it was undone: a reference count taken and dropped
  again (CPython < 3.12, or an object that is not immortal), or a write by
  the fork server after the fork;
- *different*: the worker changed it (its own objects, counters, allocator
  state in a shared pool);
- *new*: the fork server has nothing there (memory the worker mapped).

Then it samples again after ``--window`` seconds and counts the pages that
became private in between (what slow growth is made of). Linux only; needs
to read the processes' pagemap and memory (the same user, and they are this
script's descendants). With ``--owners``, also what the fork server had where
the worker wrote (``page_owners.py``: code objects by function, types, free
pool blocks). Prints markdown; nothing here is pass/fail.

    .venv/bin/python bench/pages.py --nodes 10 --seconds 60 --backend http --owners
"""

from __future__ import annotations

import argparse
import platform
import struct
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
from measure import agent_over_nodes, median, process_tree
from page_owners import owners

PAGE = 4096
PRESENT = 1 << 63
EXCLUSIVE = 1 << 56
"""pagemap: the page is mapped by this process only (Linux >= 4.2)."""


def private_pages(pid: int) -> dict[str, list[int]]:
    """mapping name -> addresses of the pages this process alone maps."""
    found: dict[str, list[int]] = {}
    with open(f"/proc/{pid}/maps", encoding="utf-8") as maps, \
            open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in maps:
            fields = line.split(None, 5)
            name = fields[5].strip() if len(fields) > 5 else ""
            if name == "[vsyscall]":
                continue
            low, high = (int(x, 16) for x in fields[0].split("-"))
            pagemap.seek(low // PAGE * 8)
            entries = pagemap.read((high - low) // PAGE * 8)
            for i, (entry,) in enumerate(struct.iter_unpack("Q", entries)):
                if entry & PRESENT and entry & EXCLUSIVE:
                    found.setdefault(name or "[anon]", []).append(low + i * PAGE)
    return found


def classify(worker: int, server: int, addresses: list[int]) -> Counter[str]:
    kinds: Counter[str] = Counter()
    with open(f"/proc/{worker}/mem", "rb") as mine, open(f"/proc/{server}/mem", "rb") as theirs:
        for address in addresses:
            mine.seek(address)
            ours = mine.read(PAGE)
            try:
                theirs.seek(address)
                original = theirs.read(PAGE)
            except OSError:
                original = b""
            if len(original) < PAGE:
                kinds["new"] += 1
            elif ours == original:
                kinds["identical"] += 1
            else:
                kinds["different"] += 1
    return kinds


def short(name: str) -> str:
    return Path(name).name if name.startswith("/") else name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--backend", choices=["http", "host"], default="http")
    parser.add_argument("--interval", default="1s", help="RECONCILE_INTERVAL")
    parser.add_argument("--seconds", type=float, default=60, help="ticking before the first look")
    parser.add_argument("--window", type=float, default=60, help="seconds between the two looks")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--owners", action="store_true",
                        help="say what the fork server had where the worker wrote "
                             "(page_owners.py; CPython 3.12/3.13 with the immortal heap)")
    args = parser.parse_args(argv)
    env = {"RECONCILE_INTERVAL": args.interval, **dict(item.split("=", 1) for item in args.env)}
    with agent_over_nodes(args.nodes, args.backend, env) as agent:
        time.sleep(args.seconds)
        workers = process_tree(agent.pid).workers
        by_pss = sorted(workers, key=lambda p: p.memory_full_info().pss)
        worker = by_pss[len(by_pss) // 2].pid
        server = psutil.Process(worker).ppid()
        first = private_pages(worker)
        kinds: dict[str, Counter[str]] = {
            name: classify(worker, server, first[name]) for name in ("[anon]", "[heap]")
            if name in first
        }
        found = owners(worker, server, first.get("[anon]", []) + first.get("[heap]", [])) \
            if args.owners else None
        time.sleep(args.window)
        second = private_pages(worker)
        uss = [p.memory_full_info().uss for p in process_tree(agent.pid).workers]

    print(f"### Private pages of the median worker: N = {args.nodes}, {args.backend} controls, "
          f"RECONCILE_INTERVAL={args.interval}, Python {platform.python_version()}"
          + (f", {' '.join(args.env)}" if args.env else ""))
    print(f"\nAfter {args.seconds:g} s of ticking; median worker USS at the end "
          f"{median(uss) / 2**20:.2f} MiB.\n")
    print("| mapping | private pages | KiB | identical to the fork server | different | new |")
    print("|---|---|---|---|---|---|")
    for name, addresses in sorted(first.items(), key=lambda kv: -len(kv[1]))[:8]:
        known = kinds.get(name)
        cells = [str(known[k]) if known else "" for k in ("identical", "different", "new")]
        print(f"| {short(name)} | {len(addresses)} | {len(addresses) * 4} | " + " | ".join(cells)
              + " |")
    before = {a for pages in first.values() for a in pages}
    grown = Counter(
        short(name) for name, pages in second.items() for a in pages if a not in before
    )
    print(f"\nPages that became private in the next {args.window:g} s: "
          f"{sum(grown.values())} ({', '.join(f'{k} {v}' for k, v in grown.most_common(4))})")
    if found is not None:
        print("\nWhat the fork server had where the worker wrote (anonymous memory and heap; "
              "each page under the cause of most of its changed words):\n")
        print("| cause | pages | changed words |")
        print("|---|---|---|")
        for cause, pages in found.pages.most_common():
            print(f"| {cause} | {pages} | {found.words.get(cause, '')} |")
        print("\nCode objects written most (changed words):", ", ".join(
            f"`{name}` {words}" for name, words in found.functions.most_common(12)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
