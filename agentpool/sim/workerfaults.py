"""Deliberate worker faults, through the agent's worker hook (``AGENTPOOL_WORKER_HOOK``).

They stand in for bugs and kernel hangs that cannot be produced on demand
here. :func:`env` gives the agent's environment for a list of ``kind:node``
pairs (``crash-at-start:bad,idle:zz-1``); unknown kinds are refused when the
agent starts (a configuration error naming the variable). Kinds:
``crash-at-start`` (the worker raises before its first tick),
``raise-in-tick`` (every tick raises an unexpected exception),
``hang-in-tick`` (every tick blocks forever, as a wedged driver call would),
``leak-in-tick`` (every tick keeps :data:`LEAK_BYTES` more memory, written, as a
leak would, until the OOM killer ends it), ``idle`` (the worker only sleeps
from its first line on, until SIGTERM or its parent's death:
``bench/floor.py``'s memory floor, a process forked from the same fork server
that does nothing of its own). A node without faults keeps
its tick as it is: the hook costs it nothing per tick.

Nothing here imports the agent: a hook is a function of a node's name, and
what it returns wraps a function of no arguments.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from collections.abc import Callable
from typing import TypeVar

KINDS = ("crash-at-start", "raise-in-tick", "hang-in-tick", "leak-in-tick", "idle")
VARIABLE = "AGENTPOOL_WORKER_HOOK"
PR_SET_PDEATHSIG = 1
LEAK_BYTES = 8 << 20

T = TypeVar("T")
Wrap = Callable[[Callable[[], T]], Callable[[], T]]


class InjectedFault(RuntimeError):  # noqa: N818 - it is a fault, named as the tests speak of it
    """Raised by an injected fault; never caught by the controller."""


def hook_spec(spec: str) -> str:
    """The worker hook that gives each ``kind:node`` of ``spec`` its fault, as
    ``AGENTPOOL_WORKER_HOOK`` names it."""
    return f"{__name__}:faults={spec}"


def env(spec: str) -> dict[str, str]:
    """The agent's environment that gives each ``kind:node`` of ``spec`` its fault."""
    return {VARIABLE: hook_spec(spec)}


def parse(spec: str) -> dict[str, frozenset[str]]:
    """The fault kinds of each node in ``spec``; ValueError for an unknown kind."""
    kinds: dict[str, set[str]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        kind, _, node = item.partition(":")
        if kind not in KINDS:
            raise ValueError(f"unknown fault {kind!r}; known: {', '.join(KINDS)}")
        kinds.setdefault(node, set()).add(kind)
    return {node: frozenset(each) for node, each in kinds.items()}


def faults(spec: str) -> Callable[[str], Wrap[T] | None]:
    """The worker hook of ``spec``'s faults (``AGENTPOOL_WORKER_HOOK``'s factory)."""
    by_node = parse(spec)

    def hook(node: str) -> Wrap[T] | None:
        kinds = by_node.get(node, frozenset())
        if "idle" in kinds:
            _idle()
        return _wrap(kinds) if kinds else None

    return hook


def _wrap(kinds: frozenset[str]) -> Wrap[T]:
    def wrap(tick: Callable[[], T]) -> Callable[[], T]:
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

    return wrap


def _idle() -> None:
    """Sleep until SIGTERM (exit 0) or the parent's death, as a worker would die with it."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0))
    while True:
        signal.pause()
