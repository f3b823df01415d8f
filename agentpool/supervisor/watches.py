"""The informers running now, one per kind, as API discovery starts and stops them.

A kind watched node by node has a family of them (:mod:`agentpool.supervisor.nodefamily`);
:meth:`Watches.informers` lists its members.

Nodes are watched from start to stop; each Joulie kind from the moment
discovery finds its CRD served until discovery finds it gone
(:mod:`agentpool.kube.selection`). Stopping a kind's informer also empties
the supervisor's cache of that kind (an empty :class:`Relisted`): a kind the
server no longer serves has no objects, and a node whose desired state came
from one must notice that it has none any more.

Discovery adds and removes from its thread, ``/readyz`` reads from the HTTP
server's, the supervisor's loop from its own: every access holds the lock,
and readers get a copy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from agentpool.kube.api import Resource
from agentpool.kube.informer import Informer, InformerEvent, Relisted
from agentpool.supervisor.nodefamily import NodeFamily

Watched = Informer | NodeFamily


class Watches:
    """The live informers by kind. Thread safe."""

    def __init__(
        self,
        make: Callable[[Resource], Watched],
        sink: Callable[[InformerEvent], None],
        on_change: Callable[[Resource, bool], None] | None = None,
    ) -> None:
        self._make = make
        self._sink = sink
        self._on_change = on_change or (lambda kind, watched: None)
        """Told (kind, True) once a kind's informer runs, (kind, False) once it is gone."""
        self._lock = threading.Lock()
        self._by_kind: dict[Resource, Watched] = {}
        self._closed = False

    def add(self, kind: Resource) -> None:
        """Start watching ``kind`` (nothing if it is watched already or the set is closed)."""
        with self._lock:
            if self._closed or kind in self._by_kind:
                return
            informer = self._by_kind[kind] = self._make(kind)
        self._on_change(kind, True)
        informer.start()

    def remove(self, kind: Resource) -> None:
        """Stop watching ``kind`` and empty its cache."""
        with self._lock:
            informer = self._by_kind.pop(kind, None)
        if informer is None:
            return
        informer.stop()
        self._on_change(kind, False)
        self._sink(Relisted(kind, []))

    def informers(self) -> list[Informer]:
        """Every informer whose cache the pod serves now (a family's members)."""
        with self._lock:
            watched = list(self._by_kind.values())
        return [
            member
            for each in watched
            for member in (each.members() if isinstance(each, NodeFamily) else [each])
        ]

    def kinds(self) -> set[Resource]:
        with self._lock:
            return set(self._by_kind)

    def stop_all(self) -> None:
        """Stop every informer; none is added after this."""
        with self._lock:
            self._closed = True
            informers = list(self._by_kind.values())
        for informer in informers:
            informer.stop()
