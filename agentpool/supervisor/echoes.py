"""Which informer events can change what the supervisor knows, before they wake its loop.

The supervisor keeps of a TelemetryProfile, a NodePowerProfile or a NodeTwin
only its name, creation time and spec (:mod:`agentpool.supervisor.clusterview`,
:mod:`agentpool.supervisor.twinview`). Every status this agent writes comes
back from the watch as a MODIFIED event of the whole object, and so does
any other writer's status or a label change: at N = 1,000 with the
5-minute status heartbeat, three or four a second, each of which woke the
loop for a turn that changed nothing. :class:`Echoes` drops a MODIFIED
event whose kept part is what the last event of the object said, in the
informer's thread; every other event (a list, an addition, a deletion, a
kind the supervisor reads more of, as NodeHardware's status) goes on, through
an :class:`EventFeed`, into the loop's queue, and wakes the loop.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from agentpool.kube.api import Resource
from agentpool.kube.informer import InformerEvent, Relisted

KINDS = frozenset({Resource.TELEMETRY_PROFILES, Resource.NODE_POWER_PROFILES,
                   Resource.NODE_TWINS})
"""The kinds of which the supervisor keeps name, creation time and spec, nothing more."""


def kept(obj: dict[str, Any]) -> dict[str, Any]:
    """What the supervisor keeps of an object of :data:`KINDS`: the views store it, and
    :class:`Echoes` compares it, so the two cannot disagree about what is news."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return {
        "metadata": {"name": meta.get("name"), "creationTimestamp": meta.get("creationTimestamp")},
        "spec": obj.get("spec"),
    }


class Echoes:
    """The kept part of each object last passed on, by kind and name. Thread safe: each kind
    has its informer's thread, and discovery empties a kind from its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[Resource, dict[Any, dict[str, Any]]] = {k: {} for k in KINDS}

    def news(self, event: InformerEvent) -> bool:
        """Whether ``event`` may change what the supervisor knows (else it is dropped)."""
        last = self._last.get(event.resource)
        if last is None:
            return True
        with self._lock:
            if isinstance(event, Relisted):
                last.clear()
                for obj in event.items:
                    view = kept(obj)
                    last[view["metadata"]["name"]] = view
                return True
            view = kept(event.obj)
            name = view["metadata"]["name"]
            if event.kind == "DELETED":
                last.pop(name, None)
                return True
            if event.kind == "MODIFIED" and last.get(name) == view:
                return False
            last[name] = view
            return True


class EventFeed:
    """The informers' sink: each event that is news (:class:`Echoes`) is queued for the
    loop, which it wakes. Called from informer threads; the loop drains :attr:`events`."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self.echoes = Echoes()
        self.events: queue.SimpleQueue[InformerEvent] = queue.SimpleQueue()
        self._wake = wake

    def __call__(self, event: InformerEvent) -> None:
        if not self.echoes.news(event):
            return
        self.events.put(event)
        self._wake()
