"""Validation of ``events.k8s.io/v1`` Events, as kube-apiserver applies it to that API.

Stands in for the apiserver's ``ValidateEventCreate`` and
``ValidateEventUpdate`` (``pkg/apis/core/validation/events.go``), for
requests through ``events.k8s.io/v1``: what an Event must carry when created
(``eventTime``, ``reportingController``, ``reportingInstance``, ``action``,
``reason``, a ``type`` of Normal or Warning, a ``note`` of at most 1 kB, a
``series`` of count >= 2 with a ``lastObservedTime``, namespace ``default``
or ``kube-system`` for a cluster-scoped ``regarding`` (as the emulator's
version, 1.30, does; 1.20 takes only ``kube-system``), none of the
deprecated core fields), and what an update may not change (everything but
``series`` and metadata). The real server's messages name the same fields;
their wording is close, not identical.
"""

from __future__ import annotations

import re
from typing import Any

from agentpool.sim.apiserver.schema import Cause

LIMIT = 128
NOTE_LIMIT = 1024
_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DEPRECATED = ("deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount",
               "deprecatedSource")
_IMMUTABLE = ("regarding", "related", "reason", "note", "reportingController",
              "reportingInstance", "type", "action", "eventTime", *_DEPRECATED)


def _required(field: str) -> Cause:
    return Cause("FieldValueRequired", "Required value", field)


def _invalid(field: str, why: str) -> Cause:
    return Cause("FieldValueInvalid", f"Invalid value: {why}", field)


def _series(event: dict[str, Any]) -> list[Cause]:
    series = event.get("series")
    if series is None:
        return []
    if not isinstance(series, dict):
        return [_invalid("series", "must be an object")]
    causes = []
    count = series.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 2:
        causes.append(_invalid("series.count", "should be at least 2"))
    if not series.get("lastObservedTime"):
        causes.append(_required("series.lastObservedTime"))
    return causes


def _common(event: dict[str, Any]) -> list[Cause]:
    """What every write of an Event with an ``eventTime`` must satisfy."""
    causes: list[Cause] = []
    namespace = (event.get("metadata") or {}).get("namespace")
    regarding = event.get("regarding") or {}
    if not regarding.get("namespace") and namespace not in ("default", "kube-system"):
        causes.append(_invalid("regarding.namespace", "does not match event.namespace"))
    controller = event.get("reportingController")
    if not controller:
        causes.append(_required("reportingController"))
    elif not isinstance(controller, str) or not _QUALIFIED.match(controller):
        causes.append(_invalid("reportingController", "must be a qualified name"))
    instance = event.get("reportingInstance")
    if not instance:
        causes.append(_required("reportingInstance"))
    elif len(str(instance)) > LIMIT:
        causes.append(_invalid("reportingInstance", f"can have at most {LIMIT} characters"))
    for field in ("action", "reason"):
        value = event.get(field)
        if not value:
            causes.append(_required(field))
        elif len(str(value)) > LIMIT:
            causes.append(_invalid(field, f"can have at most {LIMIT} characters"))
    note = event.get("note")
    if note is not None and len(str(note).encode()) > NOTE_LIMIT:
        causes.append(_invalid("note", f"can have at most {NOTE_LIMIT} characters"))
    return causes


def check_create(event: dict[str, Any]) -> list[Cause]:
    """The causes of a 422 for creating ``event`` through events.k8s.io/v1 (empty: valid)."""
    causes = _common(event) + _series(event)
    if not event.get("eventTime"):
        causes.append(_required("eventTime"))
    if event.get("type") not in ("Normal", "Warning"):
        causes.append(_invalid("type", f"has invalid value: {event.get('type')}"))
    for field in _DEPRECATED:
        if event.get(field):
            causes.append(_invalid(field, "needs to be unset"))
    return causes


def check_update(new: dict[str, Any], old: dict[str, Any]) -> list[Cause]:
    """The causes of a 422 for replacing ``old`` by ``new`` (a PUT or a patch applied)."""
    causes = _common(new)
    if new.get("series") != old.get("series"):
        causes += _series(new)
    for field in _IMMUTABLE:
        if new.get(field) != old.get(field):
            causes.append(_invalid(field, "field is immutable"))
    return causes
