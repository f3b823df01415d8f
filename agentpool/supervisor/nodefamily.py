"""A kind watched node by node: the API server sends a static pool pod its own nodes' objects.

A shard is no selector the API server knows, but a name is. While a pod of a static pool of
many shards owns at most :data:`~agentpool.supervisor.narrowing.BY_NAME_MAX_NODES` nodes,
each kind Joulie names after its node (NodeTwin, NodeHardware: the kinds written all the
time) is watched once per owned node, by ``metadata.name``, as a daemonset pod watches its one
node's: the server sends the pod nothing about other shards' nodes, instead of every event of
the cluster for the pod to pass over. Above the bound the watches would cost more than they
save (each holds a thread and a connection and reconnects every watch timeout: the figures
are :data:`~agentpool.supervisor.narrowing.BY_NAME_MAX_NODES`'s), so the kind is watched
whole.

:class:`OwnedNodes` learns the owned nodes from the Node informer's own events (its keep test
is the shard's) and tells each :class:`NodeFamily`, which starts and stops its members.

The cluster view knows a kind by its :class:`~agentpool.kube.informer.Relisted`, which replaces
all of the kind's objects; so a family passes on the union of its members' objects whenever a
member lists or leaves, and each member's changes as they come. When the owned nodes cross
the bound, the family swaps one way of watching for the other and keeps the old members
running, their changes passed on and counted by ``/readyz``, until every new member has
listed: at no moment does the cache hold less than one of the two ways saw.

At start the members list a few at a time (:data:`LISTS_AT_ONCE`) over connections the pool
keeps, and open their watches, a connection and a TLS handshake each, once every one has
listed: the pod is ready before those handshakes, not after (BENCHMARKS.md, issue 46).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

from agentpool.kube.api import Resource
from agentpool.kube.informer import Change, Informer, InformerEvent, Relisted
from agentpool.resources.parse import metadata_name

log = logging.getLogger(__name__)

Sink = Callable[[InformerEvent], None]
LISTS_AT_ONCE = 4
"""A family's members list a few at a time, over connections the pool keeps: at start a pod
of 64 nodes would otherwise open 128 connections at once (a TLS handshake each) before it
could say it is ready."""
WATCHES_WAIT_S = 10.0
"""How long a member that has listed waits for the others before opening its watch (one
whose list keeps failing holds the others back no longer)."""
WHOLE = ""
"""The member key of the one informer that watches the kind whole (node names are never empty)."""


class NodeFamily:
    """One kind's informers: one per owned node while they are few, else one for the kind.

    Members are made by ``named(node, sink)`` and ``whole(sink)``; every member's events go
    through the family, which tells the cache. Thread safe: members call in from their
    threads, :class:`OwnedNodes` from the Node informer's, the supervisor from its own.
    """

    def __init__(
        self,
        resource: Resource,
        sink: Sink,
        named: Callable[[str, Sink], Informer],
        whole: Callable[[Sink], Informer],
        max_nodes: int,
    ) -> None:
        self.resource = resource
        self._sink = sink
        self._named = named
        self._whole = whole
        self._max_nodes = max_nodes
        self._lock = threading.Lock()
        self._by_name: bool | None = None
        """How the kind is watched now; None until the owned nodes are first known."""
        self._members: dict[str, Informer] = {}
        self._items: dict[str, dict[str, dict[str, Any]]] = {}
        """Each listed member's objects by name: what a union passes on."""
        self._retiring: list[Informer] = []
        """The other way's members, running until every member of this way has listed."""
        self._started = False
        self.stopped = False
        self.list_gate = threading.BoundedSemaphore(LISTS_AT_ONCE)
        """For the members' lists (:attr:`~agentpool.kube.informer.Informer.list_gate`)."""
        self._listed = threading.Event()
        """Set once every member of the first owned nodes has listed (or the family stops):
        until then listed members hold their watches, whose connections each cost a TLS
        handshake, so that the pod is ready first."""

    def before_first_watch(self) -> None:
        """What a member waits for between its first list and its first watch."""
        self._listed.wait(WATCHES_WAIT_S)

    def watches_may_open(self) -> bool:
        """Whether members that have listed open their watches now (see ``_listed``)."""
        return self._listed.is_set()

    def by_name(self) -> bool | None:
        """Whether the kind is watched node by node now (None: owned nodes not known yet)."""
        return self._by_name

    def members(self) -> list[Informer]:
        """The informers whose caches the pod serves now: while a swap waits for the new
        members to list, the old ones (readiness and freshness are theirs until then)."""
        with self._lock:
            return list(self._retiring or self._members.values())

    def start(self) -> None:
        with self._lock:
            self._started = True
            members = list(self._members.values())
        for member in members:
            member.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._listed.set()  # no member waits for the others any more
        with self._lock:
            self.stopped = True
            every = [*self._members.values(), *self._retiring]
            self._members, self._retiring, self._items = {}, [], {}
        _stop_all(every, timeout)

    def follow(self, nodes: Collection[str]) -> None:
        """Watch the objects of ``nodes``, the pod's owned nodes now."""
        starting: list[Informer] = []
        stopping: list[Informer] = []
        with self._lock:
            if self.stopped:
                return
            by_name = len(nodes) <= self._max_nodes
            keys = set(nodes) if by_name else {WHOLE}
            if by_name != self._by_name:
                if self._by_name is not None:
                    log.info("%s: %d owned nodes, watched %s", self.resource, len(nodes),
                             "node by node, by name" if by_name else "whole")
                self._retiring += self._members.values()
                self._members, self._items, self._by_name = {}, {}, by_name
            gone = set(self._members) - keys
            for key in gone:
                stopping.append(self._members.pop(key))
                self._items.pop(key, None)
            for key in keys - set(self._members):
                member = self._members[key] = self._make(key)
                starting.append(member)
            if not self._settle() and gone and not self._retiring:
                self._pass_union()
            self._note_listed()
            started = self._started
        _stop_all(stopping, 0.0)
        if started:
            for member in starting:
                member.start()

    def _make(self, key: str) -> Informer:
        member: Informer | None = None

        def sink(event: InformerEvent) -> None:
            assert member is not None
            self._on_event(key, member, event)

        member = self._whole(sink) if key == WHOLE else self._named(key, sink)
        return member

    def _on_event(self, key: str, member: Informer, event: InformerEvent) -> None:
        with self._lock:
            if self._members.get(key) is member:
                if isinstance(event, Relisted):
                    self._items[key] = {metadata_name(obj): obj for obj in event.items}
                    if not self._settle() and not self._retiring:
                        self._pass_union()
                    self._note_listed()
                    return
                assert isinstance(event, Change)
                listed = self._items.setdefault(key, {})
                if event.kind == "DELETED":
                    listed.pop(metadata_name(event.obj), None)
                else:
                    listed[metadata_name(event.obj)] = event.obj
                self._sink(event)
            elif any(old is member for old in self._retiring) and isinstance(event, Change):
                # The cache is the old way's until the swap settles: its changes still count.
                # Its relists do not (one node's objects would replace the kind's).
                self._sink(event)

    def _settle(self) -> bool:
        """Once every member has listed, end a swap: retire the old members and pass the
        union on. Whether a swap ended now."""
        if not self._retiring or any(key not in self._items for key in self._members):
            return False
        _stop_all(self._retiring, 0.0)
        self._retiring = []
        self._pass_union()
        return True

    def _note_listed(self) -> None:
        if not self._listed.is_set() and all(key in self._items for key in self._members):
            self._listed.set()

    def _pass_union(self) -> None:
        items = [obj for listed in self._items.values() for obj in listed.values()]
        self._sink(Relisted(self.resource, items))


class OwnedNodes:
    """The nodes the Node informer keeps (the pod's own), told to the families that follow.

    It wraps the Node informer's sink, so it sees each of its events just before the cache
    does, in its thread, and tells the families within the same call: by the time the Node
    informer says it has listed, each family's members for those nodes exist.
    """

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._lock = threading.Lock()
        self._nodes: frozenset[str] | None = None
        """None until the first list."""
        self._families: list[NodeFamily] = []

    def add(self, family: NodeFamily) -> None:
        """Have ``family`` follow the owned nodes, from now on (and now, if they are known)."""
        with self._lock:
            self._families = [f for f in self._families if not f.stopped] + [family]
            if self._nodes is not None:
                family.follow(self._nodes)

    def __call__(self, event: InformerEvent) -> None:
        with self._lock:
            known = self._nodes or frozenset()
            if isinstance(event, Relisted):
                now = frozenset(metadata_name(obj) for obj in event.items)
            else:
                # Most Node events are an owned node's status: no copy of the set for them.
                name = metadata_name(event.obj)
                gone = event.kind == "DELETED"
                if (name in known) != gone:
                    now = known
                else:
                    now = known - {name} if gone else known | {name}
            if now != self._nodes:
                self._nodes = now
                for family in self._families:
                    family.follow(now)
        self._sink(event)


def _stop_all(informers: Iterable[Informer], timeout: float) -> None:
    """Stop every informer at once, then wait for each (``timeout`` for all of them)."""
    informers = list(informers)
    for informer in informers:
        informer.stop(0.0)
    deadline = time.monotonic() + timeout
    for informer in informers:
        informer.stop(max(0.0, deadline - time.monotonic()))

