"""The elastic pool's Kubernetes I/O: this pod's Lease, the pool's Leases, the StatefulSet.

Owns the wire format of what :mod:`agentpool.pool.membership` means (docs/modes.md:
elastic pool): each pool pod holds a ``coordination.k8s.io/v1`` Lease named
after itself in its namespace, labelled ``agentpool.joulie.io/pool=<pool>``,
with ``spec.holderIdentity`` = the pod, ``spec.leaseDurationSeconds``,
``spec.renewTime`` rewritten at every renewal, and two annotations: the
compact set of nodes it claims, the digest of its view and the grace its
claims keep blocking for after its lease expired. A clean exit
clears the holder and the claims. Also follows the StatefulSet's
``spec.replicas`` by list + watch with a ``metadata.name`` field selector.

Raw JSON throughout (``_preload_content=False``), as in :mod:`.api`: the
client's models would turn MicroTime into datetimes only to turn them back.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from typing import Any

from agentpool.backoff import Backoff
from agentpool.durations import utc_timestamp
from agentpool.errors import KubeError, KubePermanentError
from agentpool.jsonnumbers import json_count
from agentpool.kube.api import CONNECT_TIMEOUT_S, KubeApi, PoolResource, abort_read, json_body
from agentpool.kube.reachability import level_of
from agentpool.pool.membership import (
    ANNOTATION_CLAIMS,
    ANNOTATION_GRACE,
    ANNOTATION_VIEW,
    LABEL_POOL,
    LeaseRecord,
    decode_claims,
    decode_grace,
    encode_claims,
    encode_grace,
)
from agentpool.proctitle import name_thread

log = logging.getLogger(__name__)

LEASE_TIMEOUT_S = 5.0
"""Read timeout of lease requests: a renewal that takes longer is as good as failed."""
_TIMEOUT = (CONNECT_TIMEOUT_S, LEASE_TIMEOUT_S)
LEASE_REQUEST_S = 2 * (CONNECT_TIMEOUT_S + LEASE_TIMEOUT_S)
"""The longest one call of :class:`LeaseClient` takes: a write after a conflict reads the
Lease first, so two requests, each within its connect and read timeouts."""


def lease_record(obj: dict[str, Any]) -> LeaseRecord:
    """What membership needs of a raw Lease; undecodable claims are reported, not fatal."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    annotations = meta.get("annotations") or {}
    claims, error, grace = frozenset[str](), None, None
    try:
        claims = decode_claims(annotations.get(ANNOTATION_CLAIMS))
        grace = decode_grace(annotations.get(ANNOTATION_GRACE))
    except ValueError as exc:
        error = str(exc)
    duration = spec.get("leaseDurationSeconds")
    return LeaseRecord(
        name=str(meta.get("name") or ""),
        holder=str(spec.get("holderIdentity") or "") or None,
        duration_s=float(duration) if isinstance(duration, int | float) else 0.0,
        renewal=str(spec.get("renewTime") or ""),
        claims=claims,
        view=str(annotations.get(ANNOTATION_VIEW) or ""),
        claims_error=error,
        grace_s=grace,
    )


class LeaseClient:
    """This pod's Lease (create, renew, release) and a consistent read of the pool's."""

    def __init__(
        self, api: KubeApi, pod: str, pool: str, duration_s: float, grace_s: float
    ) -> None:
        if api.namespace is None:
            raise KubePermanentError("lease membership needs a namespace")
        self._api = api
        self._namespace = api.namespace
        self.pod = pod
        self.pool = pool
        self._duration = max(1, math.ceil(duration_s))
        self._grace = grace_s
        self._current: dict[str, Any] | None = None
        """Our Lease as last read or written (its resourceVersion is the next precondition)."""

    @property
    def selector(self) -> str:
        return f"{LABEL_POOL}={self.pool}"

    def _get(self) -> dict[str, Any] | None:
        coord = self._api.coordination
        try:
            response = self._api.call(
                "get", PoolResource.LEASES, lambda: coord.read_namespaced_lease(
                    self.pod, self._namespace, _preload_content=False, _request_timeout=_TIMEOUT))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return json_body(response, f"get lease {self.pod}")

    def own(self) -> LeaseRecord | None:
        """This pod's Lease as a previous incarnation left it (None: there is none)."""
        self._current = self._get()
        return lease_record(self._current) if self._current is not None else None

    def _body(self, holder: str | None, claims: frozenset[str], view: str) -> dict[str, Any]:
        current = self._current or {}
        meta = dict(current.get("metadata") or {})
        spec = dict(current.get("spec") or {})
        now = utc_timestamp(micro=True)
        if holder is not None and spec.get("holderIdentity") != holder:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (
                1 if spec.get("holderIdentity") else 0)
        spec.update(holderIdentity=holder, leaseDurationSeconds=self._duration, renewTime=now)
        meta["name"], meta["namespace"] = self.pod, self._namespace
        meta["labels"] = {**(meta.get("labels") or {}), LABEL_POOL: self.pool}
        meta["annotations"] = {**(meta.get("annotations") or {}),
                               ANNOTATION_CLAIMS: encode_claims(claims), ANNOTATION_VIEW: view,
                               ANNOTATION_GRACE: encode_grace(self._grace)}
        meta.pop("managedFields", None)
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": meta, "spec": spec}

    def write(self, claims: frozenset[str], view: str, holder: str | None = "") -> None:
        """Create or renew this pod's Lease carrying ``claims`` and ``view``.

        ``holder=None`` releases it (clean exit). The write is conditional on
        the resourceVersion last seen; a 409 forgets it, so the next write
        reads the Lease first (only this pod writes it, so that is rare).
        """
        who = self.pod if holder == "" else holder
        coord = self._api.coordination
        if self._current is None:
            self._current = self._get()
        # A plain dict is sent as is: the client serialises models and dicts alike.
        body: Any = self._body(who, claims, view)
        try:
            if self._current is None:
                response = self._api.call(
                    "create", PoolResource.LEASES, lambda: coord.create_namespaced_lease(
                        self._namespace, body, _preload_content=False, _request_timeout=_TIMEOUT))
            else:
                response = self._api.call(
                    "update", PoolResource.LEASES, lambda: coord.replace_namespaced_lease(
                        self.pod, self._namespace, body, _preload_content=False,
                        _request_timeout=_TIMEOUT))
        except KubeError:
            self._current = None  # unknown outcome: read before the next write
            raise
        self._current = json_body(response, f"write lease {self.pod}")

    def release(self) -> None:
        """Clear holder and claims: the pod's nodes are stopped and free for the others."""
        self.write(frozenset(), "", holder=None)

    def members(self) -> list[LeaseRecord]:
        """Every Lease of the pool, from a quorum read (a LIST without resourceVersion)."""
        listing = self._api.list(PoolResource.LEASES, label_selector=self.selector,
                                 timeout_s=LEASE_TIMEOUT_S)
        return [lease_record(obj) for obj in listing.items]


def replicas_of(obj: dict[str, Any] | None) -> int | None:
    if obj is None:
        return None
    value = (obj.get("spec") or {}).get("replicas")
    return json_count(value)


class ReplicasWatch:
    """Follows ``spec.replicas`` of one StatefulSet in a thread; ``sink`` gets each value.

    ``sink(None)`` when the StatefulSet does not exist (the pool then follows
    its live members only). Errors back off exponentially up to 10 s; a 410
    Gone relists.
    """

    def __init__(
        self, api: KubeApi, name: str, sink: Callable[[int | None], None],
        watch_timeout_s: float = 60.0,
    ) -> None:
        self._api = api
        self.name = name
        self._sink = sink
        self._watch_timeout_s = watch_timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replicas-watch", daemon=True)
        self._response: Any = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            abort_read(response)
        self._thread.join(timeout)

    def _remember(self, response: Any) -> None:
        self._response = response

    def _run(self) -> None:
        name_thread()
        backoff = Backoff(initial_s=0.5, max_s=10.0)
        while not self._stop.is_set():
            try:
                self._session()
                backoff.reset()
            except KubeError as exc:
                if self._stop.is_set():
                    return
                delay = backoff.next()
                log.log(level_of(exc), "statefulset %s: %s; retrying in %.1fs", self.name, exc,
                        delay)
                self._stop.wait(delay)

    def _session(self) -> None:
        selector = f"metadata.name={self.name}"
        listing = self._api.list(PoolResource.STATEFULSETS, field_selector=selector)
        self._sink(replicas_of(listing.items[0] if listing.items else None))
        rv = listing.resource_version
        while not self._stop.is_set():
            for event in self._api.watch(PoolResource.STATEFULSETS, rv, self._watch_timeout_s,
                                         field_selector=selector, on_open=self._remember):
                obj = event.get("object")
                if not isinstance(obj, dict):
                    continue
                kind = event.get("type")
                if kind == "ERROR":
                    return  # 410 or another watch error: relist
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                if kind in ("ADDED", "MODIFIED"):
                    self._sink(replicas_of(obj))
                elif kind == "DELETED":
                    self._sink(None)
