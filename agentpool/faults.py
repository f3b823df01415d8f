"""Deliberate worker faults, for tests and the demo only.

``AGENTPOOL_FAULTS`` holds comma-separated ``kind:node`` pairs; unknown kinds
are rejected loudly. Kinds: ``crash-at-start`` (the worker raises before its
first tick), ``raise-in-tick`` (every tick raises an unexpected exception),
``hang-in-tick`` (every tick blocks forever, as a wedged driver call would).
They stand in for bugs and kernel hangs that cannot be produced on demand
here; production never sets the variable.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

KINDS = ("crash-at-start", "raise-in-tick", "hang-in-tick")


class InjectedFault(RuntimeError):  # noqa: N818 - it is a fault, named as the tests speak of it
    """Raised by an injected fault; never caught by the controller."""


@dataclass(frozen=True)
class Faults:
    kinds: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls, node: str, raw: str | None = None) -> Faults:
        text = os.environ.get("AGENTPOOL_FAULTS", "") if raw is None else raw
        kinds: set[str] = set()
        for item in filter(None, (part.strip() for part in text.split(","))):
            kind, _, target = item.partition(":")
            if kind not in KINDS:
                raise ValueError(f"AGENTPOOL_FAULTS: unknown fault {kind!r}; known: {KINDS}")
            if target == node:
                kinds.add(kind)
        return cls(frozenset(kinds))

    def at_start(self) -> None:
        if "crash-at-start" in self.kinds:
            raise InjectedFault("injected fault: crash-at-start")

    def in_tick(self) -> None:
        if "raise-in-tick" in self.kinds:
            raise InjectedFault("injected fault: raise-in-tick")
        if "hang-in-tick" in self.kinds:
            threading.Event().wait()
