"""List+watch one resource kind in a thread and feed its events to the supervisor.

The supervisor's cache is the only consumer: it receives every object after
each (re)list and single events in between, through ``sink``. On 410 Gone
the informer relists; on any failure, temporary or not (a 403 after an RBAC
change, a 404 while a CRD is reinstalled, a malformed answer), it reconnects
with capped exponential backoff and jitter (tenacity, waiting
:func:`~agentpool.backoff.reconnect_delay`), honouring Retry-After, for as
long as the process runs: the cache keeps serving the last known state
meanwhile, and :meth:`Informer.staleness` tells readiness how long it has not
been confirmed and why. A failure without an answer from the server is
logged at debug level: :mod:`agentpool.kube.reachability` tells the outage.

What the server cannot filter for us, ``keep`` does before anything is queued:
an object that does not concern this pod (another shard's node, another node's
profile) is dropped as soon as it is decoded. With ``wants`` (the nodes whose
objects ``keep`` keeps) a watch event about no node this pod wants is passed over
before it is decoded at all, read off its line (:mod:`agentpool.kube.rawevents`:
a Node's name, or every node name a custom resource's line holds). An object once
passed on is followed until it is gone or no longer kept, so that its last event
(retargeted to another node, deleted) reaches the cache too. Where the pod wants few of
many (``names_first``), a (re)list reads every name and then each wanted object by name
(:mod:`agentpool.kube.namesfirst`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tenacity

from agentpool.backoff import RECONNECT_MAX_S, reconnect_delay
from agentpool.errors import KubeError, KubeTemporaryError
from agentpool.kube.api import KubeApi, Listing, Resource, abort_read
from agentpool.kube.namesfirst import list_wanted
from agentpool.kube.rawevents import glance, head
from agentpool.kube.reachability import level_of
from agentpool.proctitle import name_thread

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Relisted:
    """Every object of the kind, after a (re)list; replaces the cache's view."""

    resource: Resource
    items: list[dict[str, Any]]


@dataclass(frozen=True)
class Change:
    """One watch event: ADDED, MODIFIED or DELETED."""

    resource: Resource
    kind: str
    obj: dict[str, Any]


InformerEvent = Relisted | Change


class _WaitRetryAfter(tenacity.wait.wait_base):
    """Exponential backoff with jitter, but never shorter than the server's Retry-After."""

    def __init__(self, cap_s: float) -> None:
        self._cap_s = cap_s

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        delay = reconnect_delay(retry_state.attempt_number, self._cap_s)
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, KubeTemporaryError) and exc.status == 429:
            delay = max(delay, exc.delay)
        return delay


class Informer:
    """Keeps one resource kind mirrored into ``sink``; restartable, stoppable."""

    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        sink: Callable[[InformerEvent], None],
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout_s: float = 60.0,
        on_watch_restart: Callable[[Resource, str], None] | None = None,
        max_backoff_s: float = RECONNECT_MAX_S,
        keep: Callable[[dict[str, Any]], bool] | None = None,
        wants: Callable[[str], bool] | None = None,
        trim: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        label: str | None = None,
        list_gate: threading.Semaphore | None = None,
        before_first_watch: Callable[[], object] | None = None,
        names_first: bool = False,
    ) -> None:
        self.names_first = names_first and wants is not None and field_selector is None
        """List every name first, then each object ``wants`` by name
        (:mod:`agentpool.kube.namesfirst`), where the pod wants few of many; cleared once the
        server answers no Table of names."""
        self.list_gate = list_gate
        """Held while listing: informers that share one list a few at a time, over the
        connections the pool keeps, instead of each opening its own at once."""
        self.before_first_watch = before_first_watch
        """Waited for between the first list and the first watch (each watch holds a
        connection of its own: opening them can wait until every member of a family has
        listed and the pod is ready)."""
        self._watched = False
        self.label = label or str(resource)
        """What the log calls this informer: its kind, and its node where it watches one
        node's object of the kind."""
        self.api = api
        self.trim = trim
        """Cuts each object passed on down to what the cache reads (None: whole)."""
        self.keep = keep
        """Whether an object concerns this pod (None: every object does)."""
        self.wants = wants
        """The nodes whose objects ``keep`` keeps, where an event's node names tell it
        before the event is decoded (None: decode every event)."""
        self._passed: set[str] = set()
        """Names of the objects passed on since the last list and not deleted or dropped
        since: the cache holds them. Only the informer's thread touches it."""
        self.resource = resource
        self.sink = sink
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_timeout_s = watch_timeout_s
        self.on_watch_restart = on_watch_restart or (lambda resource, why: None)
        self.synced = threading.Event()
        """Set after the first successful list."""
        self.healthy = threading.Event()
        """Set while the last request succeeded (readiness)."""
        self._confirmed_at: float | None = None
        """When the server last confirmed the cache (a list, a watch opened, an event)."""
        self._started_at = time.monotonic()
        self.last_error: str | None = None
        """The last failure, kept after recovery for the log and /readyz."""
        self._stop = threading.Event()
        self._response: Any = None
        self._rv: str | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"informer-{resource}", daemon=True)
        self._retrying = tenacity.Retrying(
            wait=_WaitRetryAfter(max_backoff_s),
            retry=tenacity.retry_if_exception_type(Exception),
            stop=tenacity.stop_when_event_set(self._stop),
            sleep=self._sleep,
            before_sleep=self._before_sleep,
            reraise=True,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        with self._lock:
            response = self._response
        if response is not None:
            abort_read(response)
        if self._thread.ident is not None:  # one never started has nothing to wait for
            self._thread.join(timeout)

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def confirmed_at(self) -> float:
        """When the server last confirmed the cache (``time.monotonic``); before that ever
        happened, when the informer was made."""
        confirmed = self._confirmed_at
        return self._started_at if confirmed is None else confirmed

    def staleness(self, now: float | None = None) -> tuple[float, str | None]:
        """Seconds since the cache was last confirmed fresh (infinite before the first list),
        and the last error if the last request failed."""
        confirmed = self._confirmed_at
        age = float("inf") if confirmed is None else (now or time.monotonic()) - confirmed
        return age, None if self.healthy.is_set() else self.last_error

    def _confirm(self) -> None:
        self.healthy.set()
        self._confirmed_at = time.monotonic()

    def _before_sleep(self, state: tenacity.RetryCallState) -> None:
        self.healthy.clear()
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        self.last_error = f"{type(exc).__name__}: {exc}" if exc is not None else None
        if not isinstance(exc, KubeTemporaryError):
            self._rv = None  # a CRD reinstalled, an RBAC change: our resourceVersion means nothing
        log.log(
            level_of(exc) if isinstance(exc, KubeError) else logging.WARNING,
            "%s: %s; retrying in %.1fs",
            self.label,
            exc,
            state.upcoming_sleep,
        )
        self.on_watch_restart(self.resource, "error")

    def _run(self) -> None:
        name_thread()
        # One retrying call per watch session, so the backoff starts afresh after
        # every session that worked instead of growing over the informer's life.
        while not self._stop.is_set():
            try:
                self._retrying(self._session)
            except Exception:  # only when stopping: every failure is retried until then
                if self._stop.is_set():
                    return
                log.exception("%s informer: unexpected failure, going on", self.label)

    def _remember(self, response: Any) -> None:
        self._confirm()  # the server answered the watch: reachable, even if quiet
        with self._lock:
            self._response = response
        if self._stop.is_set():
            abort_read(response)

    def _session(self) -> None:
        """Relist if needed, then one watch stream until the server ends it or 410.

        The watch resumes from the last resourceVersion after a dropped
        connection; only 410 Gone (history lost) forces a relist, so a flaky
        network does not cost a full LIST each time.
        """
        if not self._stop.is_set():
            if self._rv is None:
                with self.list_gate or contextlib.nullcontext():
                    began = time.monotonic()
                    listing = self._list()
                log.debug("%s: listed %d in %.2fs", self.label, len(listing.items),
                          time.monotonic() - began)
                self._passed = (
                    {_name(item) for item in listing.items} if self.keep is not None else set()
                )
                self.sink(Relisted(self.resource, listing.items))
                self._confirm()
                self.synced.set()
                self._rv = listing.resource_version
            if not self._watched and self.before_first_watch is not None:
                self.before_first_watch()
                if self._stop.is_set():
                    return
            self._watched = True
            for event in self.api.watch(
                self.resource,
                self._rv,
                self.watch_timeout_s,
                self.label_selector,
                self.field_selector,
                on_open=self._remember,
                skip=self._skip if self.wants is not None else None,
            ):
                self._confirm()
                kind = str(event.get("type", ""))
                obj = event.get("object")
                if not isinstance(obj, dict):
                    raise KubeTemporaryError(f"watch {self.resource}: malformed event {event!r}")
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        log.info("%s: watch expired (410 Gone), relisting", self.label)
                        self.on_watch_restart(self.resource, "gone")
                        self._rv = None
                        break
                    raise KubeTemporaryError(
                        f"watch {self.resource}: {obj.get('reason')}: {obj.get('message')}",
                        int(obj.get("code") or 0) or None,
                    )
                self._rv = str((obj.get("metadata") or {}).get("resourceVersion") or self._rv)
                if kind in ("ADDED", "MODIFIED", "DELETED") and self._admit(kind, obj):
                    self.sink(Change(self.resource, kind, obj if self.trim is None
                                     else self.trim(obj)))
                # BOOKMARK: only the resourceVersion moves on.
            # Otherwise the server ended the stream (timeoutSeconds): _run watches again.

    def _list(self) -> Listing:
        if self.names_first and self.wants is not None:
            listing = list_wanted(self.api, self.resource, self.wants, self.label_selector,
                                  keep=self.keep, trim=self.trim)
            if listing is not None:
                return listing
            self.names_first = False
            log.info("%s: the API server answers no Table of names; listing the kind whole",
                     self.label)
        return self.api.list(self.resource, self.label_selector, self.field_selector,
                             keep=self.keep, trim=self.trim)

    def _admit(self, kind: str, obj: dict[str, Any]) -> bool:
        """Whether a watch event goes to the cache: its object is kept, or was until now."""
        if self.keep is None:
            return True
        name = _name(obj)
        kept = kind != "DELETED" and self.keep(obj)
        known = name in self._passed
        if kept:
            self._passed.add(name)
        else:
            self._passed.discard(name)
        return kept or known

    def _skip(self, line: str) -> str | None:
        """The resourceVersion of an event about no node this pod wants and no object it
        follows, read before the line is decoded; None: decode it (one that concerns the
        pod, or a line that cannot be read safely without decoding it)."""
        wants = self.wants
        if wants is None:
            return None
        if self.resource is Resource.NODES:
            read = head(line)
            if read is None or read[1] in self._passed or wants(read[1]):
                return None
            return read[2]
        seen = glance(line)
        if (
            seen is None
            or not seen.nodes  # targets no node: let ``keep`` say what that means
            or any(wants(node) for node in seen.nodes)
            or not seen.names.isdisjoint(self._passed)
        ):
            return None
        return seen.version


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name") or "") if isinstance(meta, dict) else ""
