"""A worker's own memory at the stages of its life, through the agent's worker hook.

For ``bench/memory.py --probe``: :func:`env` gives the agent's environment
that makes each worker append a line of its ``/proc/self/smaps_rollup`` (PSS,
USS, anonymous memory, and how many modules it has) to a file of its own in
a directory, right after the fork, once set up, and after ticks
:data:`TICKS`. The probe costs a worker memory of its own (its code touches
shared pages too): compare numbers only between runs with the same setting.

Nothing here imports the agent: a hook is a function of a node's name, and
what it returns wraps a function of no arguments.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from typing import TypeVar

VARIABLE = "AGENTPOOL_WORKER_HOOK"
TICKS = (1, 2, 10, 60, 300, 600)
"""Ticks after which a probed worker records its memory."""

T = TypeVar("T")
Wrap = Callable[[Callable[[], T]], Callable[[], T]]


def env(directory: str) -> dict[str, str]:
    """The agent's environment that has every worker record itself in ``directory``."""
    return {VARIABLE: f"{__name__}:probe={directory}"}


def probe(directory: str) -> Callable[[str], Wrap[T]]:
    """The worker hook that records into ``directory`` (``AGENTPOOL_WORKER_HOOK``'s factory)."""
    if not os.path.isdir(directory):
        raise ValueError(f"{directory!r} is not a directory")

    def hook(node: str) -> Wrap[T]:
        path = os.path.join(directory, re.sub(r"[^\w.-]", "_", node))
        record(path, "fork")

        def wrap(tick: Callable[[], T]) -> Callable[[], T]:
            record(path, "setup")
            count = 0

            def probed_tick() -> T:
                nonlocal count
                result = tick()
                count += 1
                if count in TICKS:
                    record(path, f"tick{count}")
                return result

            return probed_tick

        return wrap

    return hook


def record(path: str, stage: str) -> None:
    """Append this process's memory at ``stage`` to ``path``."""
    fields = {}
    with open("/proc/self/smaps_rollup", encoding="ascii") as f:
        for line in f:
            head, _, rest = line.partition(":")
            if rest.strip().endswith("kB"):
                fields[head] = int(rest.split()[0])
    uss = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    with open(path, "a", encoding="ascii") as f:
        f.write(
            f"{stage} {time.monotonic():.3f} pss={fields.get('Pss', 0)} uss={uss} "
            f"anon={fields.get('Anonymous', 0)} modules={len(sys.modules)}\n"
        )
