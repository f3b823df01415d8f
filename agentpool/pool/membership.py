"""Who is in an elastic pool right now, as one pod sees it: pure logic, no I/O.

Owns the meaning of the pool's Leases (one per pod, named after it, in its
namespace; docs/modes.md: elastic pool): what a pod publishes on its own Lease
(holder, renewal, the nodes it claims, a digest of its view), when another
pod counts as a live member, how long its claims still block a node after it
stops renewing, and which members the assignment runs over. The Kubernetes
side (reading and writing the objects) is :mod:`agentpool.kube.leases`; the
handoff rules are :mod:`agentpool.pool.handoff`.

Liveness is judged on the observer's own monotonic clock, as client-go's
leader election does: a lease is live while less than its duration has
passed since this pod *saw* its renewal change. Clocks of different machines
are never compared, so clock skew cannot make a lease look expired early.
"""

from __future__ import annotations

import base64
import binascii
import math
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from agentpool.pool.assignment import (
    Assignment,
    fnv32a,
    member_order,
    ordinal_from_pod_name,
    owner_of,
)

LABEL_POOL = "agentpool.joulie.io/pool"
"""Label on every pool Lease: the pool's name (the StatefulSet's), to list them by selector."""
ANNOTATION_CLAIMS = "agentpool.joulie.io/claims"
"""The nodes the holder controls or is about to control (see :func:`encode_claims`)."""
ANNOTATION_VIEW = "agentpool.joulie.io/view"
"""The holder's :func:`view_digest`: pods acting on different views disagree."""
ANNOTATION_GRACE = "agentpool.joulie.io/grace-seconds"
"""How long the holder's claims still block after its lease expired (its own
:func:`~agentpool.pool.fence.grace_for` of its SHUTDOWN_TIMEOUT), in seconds."""

_CLAIMS_PREFIX = "z1:"


def encode_claims(nodes: Iterable[str]) -> str:
    """A compact claim set: ``z1:`` + base64 of zlib of the sorted names joined by newlines.

    Node names compress well (shared prefixes, digits), so several thousand
    claims stay far below the 256 KiB limit on an object's annotations. The
    empty set is the empty string.
    """
    names = sorted(set(nodes))
    if not names:
        return ""
    packed = zlib.compress("\n".join(names).encode(), 9)
    return _CLAIMS_PREFIX + base64.b64encode(packed).decode("ascii")


def decode_claims(text: str | None) -> frozenset[str]:
    """Inverse of :func:`encode_claims`; ValueError on anything else."""
    if not text:
        return frozenset()
    if not text.startswith(_CLAIMS_PREFIX):
        raise ValueError(f"claims do not start with {_CLAIMS_PREFIX!r}")
    try:
        raw = zlib.decompress(base64.b64decode(text[len(_CLAIMS_PREFIX):], validate=True))
    except (binascii.Error, zlib.error) as exc:
        raise ValueError(f"claims are not base64 zlib: {exc}") from None
    return frozenset(name for name in raw.decode().split("\n") if name)


@dataclass(frozen=True)
class LeaseRecord:
    """One pool Lease as read from the API (the parts membership needs)."""

    name: str
    """The Lease's name, which is its pod's name."""
    holder: str | None
    """``spec.holderIdentity``; None (or empty) once the pod released it on a clean exit."""
    duration_s: float
    """``spec.leaseDurationSeconds``."""
    renewal: str
    """``spec.renewTime`` as written: only compared for change, never as a clock."""
    claims: frozenset[str] = frozenset()
    view: str = ""
    claims_error: str | None = None
    """Why the claims or grace annotation did not decode (its nodes are then unknown,
    and its claims block every node)."""
    grace_s: float | None = None
    """The grace the holder published; None from a holder that publishes none (an older
    agent), whose grace is taken to be the observer's own."""


def encode_grace(grace_s: float) -> str:
    return f"{grace_s:g}"


def decode_grace(text: str | None) -> float | None:
    """Inverse of :func:`encode_grace` (None: not published); ValueError on anything else."""
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"grace {text!r} is not a finite number of seconds >= 0")
    return value


@dataclass
class _Seen:
    record: LeaseRecord
    since: float
    """Observer's monotonic time at which the current (holder, renewal) was first seen."""


@dataclass
class MemberTracker:
    """The leases one pod has seen, and what they mean at a given moment."""

    grace_s: float
    """After a lease expires its claims still block nodes this long, unless its holder
    published its own grace: time for the holder, which stopped its workers when it
    could not renew, to finish stopping them."""
    _seen: dict[str, _Seen] = field(default_factory=dict)

    def observe(self, records: Iterable[LeaseRecord], now: float) -> None:
        """A complete, consistent read of the pool's leases at ``now``."""
        seen: dict[str, _Seen] = {}
        for record in records:
            old = self._seen.get(record.name)
            same = old is not None and (old.record.holder, old.record.renewal) == (
                record.holder, record.renewal)
            # A lease seen for the first time counts as just renewed: safe for its claims,
            # at the price of waiting a full duration for a pod that died before we started.
            seen[record.name] = _Seen(record, old.since if same and old else now)
        self._seen = seen

    def _expires(self, seen: _Seen) -> float | None:
        if not seen.record.holder:
            return None
        return seen.since + seen.record.duration_s

    def live(self, now: float) -> set[str]:
        """Holders whose lease has not expired by this observer's clock."""
        return {name for name, seen in self._seen.items()
                if (end := self._expires(seen)) is not None and now < end}

    def claims_of_others(self, me: str, now: float) -> dict[str, frozenset[str] | None]:
        """Claims that still block nodes: of live members, and of expired ones within the
        grace each published (or ours, from a holder that publishes none).

        A lease whose annotations did not decode may claim anything: it maps to
        None, which blocks every node, until it expired and its grace (ours: its
        own is unknown too) has passed.
        """
        blocking: dict[str, frozenset[str] | None] = {}
        for name, seen in self._seen.items():
            end = self._expires(seen)
            if name == me or end is None:
                continue
            record = seen.record
            grace = record.grace_s if record.grace_s is not None else self.grace_s
            if now >= end + grace:
                continue
            blocking[name] = None if record.claims_error is not None else record.claims
        return blocking

    def views(self, now: float) -> dict[str, str]:
        """The view digest each live member published."""
        live = self.live(now)
        return {name: seen.record.view for name, seen in self._seen.items() if name in live}

    def record(self, name: str) -> LeaseRecord | None:
        seen = self._seen.get(name)
        return seen.record if seen else None


def assignment_members(live: Iterable[str], replicas: int | None) -> list[str]:
    """The members nodes are assigned over: live ones, minus pods being scaled away.

    With the StatefulSet's ``spec.replicas`` known, a pod whose ordinal is at
    or above it is on its way out: it gets no nodes, so it hands them over
    while it still runs instead of after it is killed.
    """
    members = member_order(live)
    if replicas is None:
        return members
    return [m for m in members
            if (ordinal := ordinal_from_pod_name(m)) is None or ordinal < replicas]


def view_digest(members: Iterable[str], assignment: Assignment) -> str:
    """8 hex digits naming a view: two pods with the same digest assign identically."""
    return f"{fnv32a(assignment.value + ':' + ','.join(member_order(members))):08x}"


def desired_nodes(
    nodes: Iterable[str], members: list[str], me: str, assignment: Assignment
) -> set[str]:
    """The nodes ``me`` should control under this view (none if it is not a member)."""
    if me not in members:
        return set()
    return {node for node in nodes if owner_of(node, members, assignment) == me}


class DesiredNodes:
    """:func:`desired_nodes` of one pod, recomputed only when the nodes or members change.

    The supervisor asks at every loop turn, and the answer costs a hash per node
    and member (tens of milliseconds at thousands of nodes); the inputs change only
    with the cluster. Pass the same frozenset while the nodes are unchanged and
    the check is one comparison.
    """

    def __init__(self, me: str, assignment: Assignment) -> None:
        self.me = me
        self.assignment = assignment
        self.computed = 0
        """How many times the answer was computed (not taken from the cache)."""
        self._key: tuple[frozenset[str], tuple[str, ...]] | None = None
        self._value: frozenset[str] = frozenset()

    def __call__(self, nodes: frozenset[str], members: list[str]) -> frozenset[str]:
        key = (nodes, tuple(members))
        if key != self._key:
            self._key = key
            self._value = frozenset(desired_nodes(nodes, members, self.me, self.assignment))
            self.computed += 1
        return self._value
