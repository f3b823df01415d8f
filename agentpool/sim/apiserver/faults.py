"""Fault injection: rules that make the next matching requests misbehave.

Owns the rule table tests fill through :meth:`ApiEmulator.inject` and the
decision, per request, of which fault (if any) it gets. A rule matches on
verb, resource, subresource and name, and is consumed one request at a time,
in the order rules were added. Faults are decided *before* a request touches
the store, so a write answered with an injected error changes nothing.

Thread-safe: tests add rules from their thread while handlers consume them.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")

# Reasons the apiserver gives with these codes (what clients switch on).
_REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
    409: "Conflict", 410: "Expired", 422: "Invalid", 429: "TooManyRequests",
    500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
}


def reason_for(code: int) -> str:
    return _REASONS.get(code, "InternalError" if code >= 500 else "BadRequest")


class FaultKind(enum.Enum):
    ERROR = "error"
    """Answer with an HTTP error ``Status`` (``code``); a watch gets 410 as an ERROR event."""
    HANG = "hang"
    """Hold the request until ``delay`` passes (forever if None) or the emulator
    stops, then close the connection without an answer: a black-holed server."""
    SLOW = "slow"
    """Wait ``delay`` seconds, then serve the request normally."""
    DROP = "drop"
    """Close the connection at once without an answer."""


@dataclass
class FaultRule:
    kind: FaultKind
    code: int = 0
    """HTTP status for ERROR."""
    verb: str | None = None
    """One of :data:`VERBS`; None matches any."""
    resource: str | None = None
    """Plural name (``telemetryprofiles``); None matches any."""
    subresource: str | None = None
    """None matches any; ``""`` only the object itself; ``"status"`` only ``/status``."""
    name: str | None = None
    """Object name; None matches any (and collection requests)."""
    remaining: int | None = 1
    """Requests still to fault; None: until cleared."""
    retry_after: int | None = None
    """``Retry-After`` seconds sent with the error (429 defaults to 1)."""
    delay: float | None = None
    """Seconds for SLOW and HANG."""

    def matches(self, verb: str, resource: str, subresource: str, name: str | None) -> bool:
        return (
            (self.verb is None or self.verb == verb)
            and (self.resource is None or self.resource == resource)
            and (self.subresource is None or self.subresource == subresource)
            and (self.name is None or self.name == name)
        )


def parse_fault(fault: str | int) -> tuple[FaultKind, int]:
    """``"500"``, ``429``, ``"hang"``, ``"slow"``, ``"drop"`` -> (kind, code)."""
    text = str(fault).strip().lower()
    if text.isdigit() and 400 <= int(text) <= 599:
        return FaultKind.ERROR, int(text)
    try:
        return FaultKind(text), 0
    except ValueError:
        raise ValueError(
            f"unknown fault {fault!r}: expected an HTTP error code (400-599), "
            "'hang', 'slow' or 'drop'"
        ) from None


class FaultTable:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []

    def add(self, rule: FaultRule) -> None:
        if rule.verb is not None and rule.verb not in VERBS:
            raise ValueError(f"unknown verb {rule.verb!r}; expected one of {VERBS}")
        if rule.remaining is not None and rule.remaining < 1:
            raise ValueError("times must be >= 1 (or None for until cleared)")
        with self._lock:
            self._rules.append(rule)

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def pending(self) -> int:
        """Requests still to be faulted by counted rules (unlimited rules count once)."""
        with self._lock:
            return sum(1 if r.remaining is None else r.remaining for r in self._rules)

    def take(
        self, verb: str, resource: str, subresource: str, name: str | None
    ) -> FaultRule | None:
        """The fault this request gets, consuming one use of the first matching rule."""
        with self._lock:
            for i, rule in enumerate(self._rules):
                if not rule.matches(verb, resource, subresource, name):
                    continue
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining == 0:
                        del self._rules[i]
                return rule
            return None
