"""The emulator's state: objects, the resourceVersion counter, the event history.

Owns every stored object and the rules of writing them: metadata bookkeeping
(``uid``, ``creationTimestamp``, ``generation``, a global monotonically
increasing ``resourceVersion`` as etcd gives), optimistic concurrency (409 on a
stale ``metadata.resourceVersion``), the status subresource split,
namespaces (a namespaced object is keyed ``<namespace>/<name>``), and a
bounded history of events from which watches replay.

Thread-safe: one lock guards everything, because HTTP handlers (on the
server's loop thread) and the direct Python API (on a test's thread) write
concurrently. Events are handed to subscribers *under* that lock so that every
watcher sees them in resourceVersion order; a subscriber's ``deliver`` must
therefore only enqueue (``loop.call_soon_threadsafe``), never block.

Stored objects are never mutated once stored: a write builds a new dict
(sharing unchanged subtrees), so the history and open watches may hold
references instead of copies. That is what keeps a write's cost flat.
Callers of :meth:`Store.get` and :meth:`Store.list_objects` must not mutate what they
get.
"""

from __future__ import annotations

import enum
import secrets
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from agentpool.sim.apiserver.errors import (
    AlreadyExistsError,
    ApiError,
    BadRequestError,
    ConflictError,
    GoneError,
    NotFoundError,
    StatusDetails,
)
from agentpool.sim.apiserver.eventcheck import check_create, check_update
from agentpool.sim.apiserver.resources import EVENTS, RESOURCES, ResourceType
from agentpool.sim.apiserver.schema import Cause, Schema, invalid_message, prune, validate
from agentpool.sim.apiserver.selectors import ObjectFilter
from agentpool.sim.apiserver.workloads import default_statefulset

KubeObject = dict[str, Any]

DEFAULT_HISTORY = 10_000
"""Events kept per resource type for watch replay; older resourceVersions get 410 Gone."""


class EventType(enum.StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True, slots=True)
class Event:
    rv: int
    plural: str
    type: EventType
    obj: KubeObject
    """The object after the change; for DELETED, the last state with the deletion's rv."""
    old: KubeObject | None = None
    """The object before the change (None for ADDED): selector transitions need it."""


class Subscriber(Protocol):
    def deliver(self, event: Event) -> None:
        """Called under the store lock from any thread: enqueue only."""


def _timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(rt: ResourceType, name: str, namespace: str | None) -> str:
    """Where an object is kept: its name, or ``<namespace>/<name>`` for a namespaced kind."""
    if not rt.namespaced:
        return name
    if not namespace:
        raise BadRequestError(f"{rt.kind} is namespaced: a namespace is required")
    return f"{namespace}/{name}"


def _body(obj: KubeObject, *, without_status: bool) -> dict[str, Any]:
    """What ``generation`` tracks: everything but metadata (and status, when split off)."""
    skip = {"metadata", "status"} if without_status else {"metadata"}
    return {k: v for k, v in obj.items() if k not in skip}


class Store:
    """Objects of every served type, with events for watchers."""

    def __init__(
        self, types: Iterable[ResourceType] = RESOURCES, history_limit: int = DEFAULT_HISTORY
    ) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, dict[str, KubeObject]] = {rt.plural: {} for rt in types}
        self._subscribers: dict[str, list[Subscriber]] = {plural: [] for plural in self._objects}
        self._rv = 0
        # Per resource type, as the apiserver's watch cache: a burst of status
        # patches must not expire a node watcher's resourceVersion.
        self._history: dict[str, deque[Event]] = {plural: deque() for plural in self._objects}
        self._history_limit = history_limit
        self._compacted_rv = dict.fromkeys(self._objects, 0)
        """Per type, the highest resourceVersion whose event was dropped from the history."""
        self._schemas: dict[str, Schema] = {}
        """Per type, the installed CRD's openAPIV3Schema: writes are pruned and validated."""

    def install_schema(self, plural: str, schema: Schema) -> None:
        """Prune and validate every later write of ``plural`` as a CRD with ``schema`` would."""
        if plural not in self._objects:
            raise KeyError(f"the emulator does not serve {plural!r}")
        with self._lock:
            self._schemas[plural] = schema

    def _admit(
        self, rt: ResourceType, obj: KubeObject, name: str, current: KubeObject | None = None,
    ) -> KubeObject:
        """The object as the schema keeps it; 422 Invalid naming each violation.

        ``current``: the object being replaced (None on create), for built-in kinds
        whose validation compares old and new (Events).
        """
        if rt is EVENTS:
            causes = check_create(obj) if current is None else check_update(obj, current)
            self._refuse(rt, name, causes)
            return obj
        schema = self._schemas.get(rt.plural)
        if schema is None:
            return obj
        pruned: KubeObject = prune(obj, schema, root=True)
        self._refuse(rt, name, validate(pruned, schema))
        return pruned

    @staticmethod
    def _refuse(rt: ResourceType, name: str, causes: list[Cause]) -> None:
        if causes:
            details: StatusDetails = {"name": name, "group": rt.group, "kind": rt.kind,
                                      "causes": [c.as_dict() for c in causes]}
            raise ApiError(422, "Invalid", invalid_message(rt.kind, rt.group, name, causes),
                           details)

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def history_length(self, plural: str | None = None) -> int:
        """Events kept for replay, of one type or of all."""
        with self._lock:
            if plural is not None:
                return len(self._history[plural])
            return sum(len(events) for events in self._history.values())

    # -- reads -------------------------------------------------------------

    def get(self, rt: ResourceType, name: str, namespace: str | None = None) -> KubeObject:
        with self._lock:
            return self._current(rt, name, namespace)

    def list_objects(
        self, rt: ResourceType, flt: ObjectFilter | None = None
    ) -> tuple[list[KubeObject], int]:
        """Matching objects sorted by name, and the resourceVersion they are current at."""
        flt = flt or ObjectFilter()
        with self._lock:
            items = [obj for _, obj in sorted(self._objects[rt.plural].items()) if flt.matches(obj)]
            return items, self._rv

    def _current(self, rt: ResourceType, name: str, namespace: str | None) -> KubeObject:
        try:
            return self._objects[rt.plural][_key(rt, name, namespace)]
        except KeyError:
            raise NotFoundError(rt.plural, rt.group, name) from None

    # -- writes ------------------------------------------------------------

    def create(
        self, rt: ResourceType, obj: KubeObject, namespace: str | None = None
    ) -> KubeObject:
        """Store a new object; ``obj`` becomes the store's (do not mutate it afterwards).

        A namespaced kind takes ``namespace`` (the URL's) or ``metadata.namespace``;
        the two must agree. A cluster-scoped kind drops ``metadata.namespace``.
        """
        metadata = dict(obj.get("metadata") or {})
        if rt.namespaced:
            given = metadata.get("namespace")
            if namespace and given and given != namespace:
                raise BadRequestError(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            metadata["namespace"] = namespace or given
        else:
            metadata.pop("namespace", None)
        name = metadata.get("name")
        if not name and metadata.get("generateName"):
            name = f"{metadata['generateName']}{secrets.token_hex(3)[:5]}"
        if not name or not isinstance(name, str):
            raise ApiError(
                422, "Invalid",
                f"{rt.kind}: metadata.name: Required value: name or generateName is required",
            )
        # apiVersion and kind first, as the apiserver orders them (kubectl output reads so).
        new: KubeObject = {"apiVersion": rt.api_version, "kind": rt.kind}
        new.update((k, v) for k, v in obj.items() if k not in new)
        if rt.status_subresource:
            # A CRD with a status subresource drops status on create, too.
            new.pop("status", None)
        if rt.scale_subresource:
            new = default_statefulset(new)
        with self._lock:
            new = self._admit(rt, {**new, "metadata": metadata}, name)
            key = _key(rt, name, metadata.get("namespace"))
            if key in self._objects[rt.plural]:
                raise AlreadyExistsError(rt.plural, rt.group, name)
            self._rv += 1
            metadata.update(
                name=name, uid=str(uuid.uuid4()), creationTimestamp=_timestamp(),
                resourceVersion=str(self._rv), generation=1,
            )
            metadata.pop("deletionTimestamp", None)
            new["metadata"] = metadata
            self._objects[rt.plural][key] = new
            self._emit(Event(self._rv, rt.plural, EventType.ADDED, new, None))
            return new

    def update(
        self,
        rt: ResourceType,
        name: str,
        compute: Callable[[KubeObject], KubeObject],
        subresource: str | None = None,
        namespace: str | None = None,
    ) -> KubeObject:
        """Replace an object by ``compute(current)`` (a PUT body, or a patch applied).

        ``compute`` runs under the lock, must not mutate its argument and must
        be quick. A ``metadata.resourceVersion`` in what it returns is a
        precondition: one other than the current version is a 409 ConflictError.
        Writing an unchanged object is a no-op (no new version, no event),
        as on a real apiserver.
        """
        with self._lock:
            current = self._current(rt, name, namespace)
            candidate = compute(current)
            _check_preconditions(rt, name, current, candidate)
            new = _merged(rt, current, candidate, subresource)
            new = self._admit(rt, new, name, current)
            if new == current:
                return current
            generation = current["metadata"]["generation"]
            if _body(new, without_status=rt.status_subresource) != _body(
                current, without_status=rt.status_subresource
            ):
                generation += 1
            self._rv += 1
            new["metadata"] = dict(
                new["metadata"], resourceVersion=str(self._rv), generation=generation
            )
            self._objects[rt.plural][_key(rt, name, namespace)] = new
            self._emit(Event(self._rv, rt.plural, EventType.MODIFIED, new, current))
            return new

    def delete(
        self, rt: ResourceType, name: str, precondition_rv: str | None = None,
        precondition_uid: str | None = None, namespace: str | None = None,
    ) -> KubeObject:
        """Remove an object; returns its last state stamped with the deletion's version."""
        with self._lock:
            current = self._current(rt, name, namespace)
            meta = current["metadata"]
            if precondition_uid and precondition_uid != meta["uid"]:
                raise ConflictError(
                    rt.plural, rt.group, name,
                    f"Precondition failed: UID in precondition: {precondition_uid}, "
                    f"UID in object meta: {meta['uid']}",
                )
            if precondition_rv and precondition_rv != meta["resourceVersion"]:
                raise ConflictError(
                    rt.plural, rt.group, name,
                    f"Precondition failed: ResourceVersion in precondition: {precondition_rv}, "
                    f"ResourceVersion in object meta: {meta['resourceVersion']}",
                )
            self._rv += 1
            gone = dict(current, metadata=dict(meta, resourceVersion=str(self._rv)))
            del self._objects[rt.plural][_key(rt, name, namespace)]
            self._emit(Event(self._rv, rt.plural, EventType.DELETED, gone, current))
            return gone

    # -- watching ------------------------------------------------------------

    def subscribe(self, rt: ResourceType, since: int | None, subscriber: Subscriber) -> list[Event]:
        """Register a watcher; returns the events it must send before live ones.

        ``since=None`` (the client gave no resourceVersion, or "0"): a synthetic
        ADDED per current object. Otherwise: every kept event of this type
        after ``since``; an older ``since`` than the history reaches is 410 Gone.
        Snapshot and registration happen under one lock, so nothing falls
        between the replay and the live stream.
        """
        with self._lock:
            if since is None:
                initial = [
                    Event(int(obj["metadata"]["resourceVersion"]), rt.plural, EventType.ADDED, obj)
                    for _, obj in sorted(self._objects[rt.plural].items())
                ]
            elif since < self._compacted_rv[rt.plural]:
                oldest = self._compacted_rv[rt.plural] + 1
                raise GoneError(f"too old resource version: {since} ({oldest})")
            else:
                initial = []
                for event in reversed(self._history[rt.plural]):  # newest first: stop at `since`
                    if event.rv <= since:
                        break
                    initial.append(event)
                initial.reverse()
            self._subscribers[rt.plural].append(subscriber)
            return initial

    def unsubscribe(self, rt: ResourceType, subscriber: Subscriber) -> None:
        with self._lock:
            subscribers = self._subscribers[rt.plural]
            if subscriber in subscribers:
                subscribers.remove(subscriber)

    def _emit(self, event: Event) -> None:
        """Record and fan out an event. Caller holds the lock."""
        history = self._history[event.plural]
        history.append(event)
        while len(history) > self._history_limit:
            self._compacted_rv[event.plural] = history.popleft().rv
        for subscriber in self._subscribers[event.plural]:
            subscriber.deliver(event)


def _check_preconditions(
    rt: ResourceType, name: str, current: KubeObject, candidate: KubeObject
) -> None:
    """A stale ``resourceVersion`` is a 409, a different name a 400, as on the apiserver."""
    cand_meta = candidate.get("metadata") or {}
    wanted_rv = cand_meta.get("resourceVersion")
    if wanted_rv not in (None, "") and str(wanted_rv) != current["metadata"]["resourceVersion"]:
        raise ConflictError(
            rt.plural, rt.group, name,
            "the object has been modified; please apply your changes to the latest "
            "version and try again",
        )
    if cand_meta.get("name", name) != name:
        raise BadRequestError(
            f"the name of the object ({cand_meta.get('name')}) does not match the name "
            f"on the URL ({name})"
        )


def _merged(
    rt: ResourceType, current: KubeObject, candidate: KubeObject, subresource: str | None
) -> KubeObject:
    """What a write of ``candidate`` makes of ``current`` (before versioning)."""
    cur_meta = current["metadata"]
    if subresource == "status":
        # /status writes change only .status; everything else stays.
        new = {k: v for k, v in current.items() if k != "status"}
        if "status" in candidate:
            new["status"] = candidate["status"]
        metadata = cur_meta
    else:
        new = dict(candidate)
        if rt.status_subresource:
            new.pop("status", None)
            if "status" in current:
                new["status"] = current["status"]
        metadata = dict(candidate.get("metadata") or {})
        # Identity and bookkeeping are the server's, whatever the body says.
        for key in ("name", "namespace", "uid", "creationTimestamp", "generation",
                    "resourceVersion"):
            if key in cur_meta:
                metadata[key] = cur_meta[key]
    new["kind"], new["apiVersion"] = rt.kind, rt.api_version
    new["metadata"] = metadata
    return new
