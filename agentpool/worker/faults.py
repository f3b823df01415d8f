"""Deliberate worker faults, for tests and the demo only.

``AGENTPOOL_FAULTS`` holds comma-separated ``kind:node`` pairs; unknown kinds
are rejected loudly. Kinds: ``crash-at-start`` (the worker raises before its
first tick), ``raise-in-tick`` (every tick raises an unexpected exception),
``hang-in-tick`` (every tick blocks forever, as a wedged driver call would),
``leak-in-tick`` (every tick keeps :data:`LEAK_BYTES` more memory, written, as a
leak would, until the OOM killer ends it), ``idle`` (the worker only sleeps from
its first line on, until SIGTERM or its parent's death: ``bench/floor.py``'s
memory floor, a process forked from the same fork server that does nothing of
its own). They stand in for bugs and kernel hangs that cannot be produced on
demand here. The variable is a test hook, deliberately not one of the agent's
settings (``agentpool --help`` does not list it), and it is read once, when a
worker starts: a worker without faults ticks its controller directly, so
production pays nothing per tick.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TypeVar

KINDS = ("crash-at-start", "raise-in-tick", "hang-in-tick", "leak-in-tick", "idle")
ENV = "AGENTPOOL_FAULTS"
LEAK_BYTES = 8 << 20

T = TypeVar("T")


class InjectedFault(RuntimeError):  # noqa: N818 - it is a fault, named as the tests speak of it
    """Raised by an injected fault; never caught by the controller."""


def faults_for(node: str, raw: str | None = None) -> frozenset[str]:
    """The fault kinds ``AGENTPOOL_FAULTS`` (or ``raw``) gives ``node``."""
    text = os.environ.get(ENV, "") if raw is None else raw
    kinds: set[str] = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        kind, _, target = item.partition(":")
        if kind not in KINDS:
            raise ValueError(f"{ENV}: unknown fault {kind!r}; known: {KINDS}")
        if target == node:
            kinds.add(kind)
    return frozenset(kinds)


def tick_with_faults(node: str, tick: Callable[[], T], raw: str | None = None) -> Callable[[], T]:
    """``tick`` itself when ``node`` has no faults; otherwise ``tick`` behind its faults.

    Called once at worker start, where ``crash-at-start`` raises.
    """
    kinds = faults_for(node, raw)
    if not kinds:
        return tick
    if "crash-at-start" in kinds:
        raise InjectedFault("injected fault: crash-at-start")

    leaked: list[bytes] = []

    def faulty_tick() -> T:
        if "leak-in-tick" in kinds:
            leaked.append(b"\1" * LEAK_BYTES)  # every page written: charged to the worker
        if "raise-in-tick" in kinds:
            raise InjectedFault("injected fault: raise-in-tick")
        if "hang-in-tick" in kinds:
            threading.Event().wait()
        return tick()

    return faulty_tick
