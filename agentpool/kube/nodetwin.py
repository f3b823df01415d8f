"""NodeTwin status as the agent writes it, and the operator's naming of per-node objects.

The agent owns exactly ``status.controlStatus.cpu`` of a NodeTwin, and
``status.controlStatus.gpu`` of a node with a GPU cap: the four keys Joulie's
CRD declares there (``backend``, ``result``, ``message``, ``updatedAt``).
Everything else in the status (``schedulableClass``, the predicted scores,
``powerMeasurement``...) belongs to the
operator, so the write is a JSON merge patch through ``/status`` that
names only those keys, and never carries anything the schema does not
declare (a real server would prune it; what the profile API reports in
``observed`` goes to metrics instead).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agentpool.spec.values import TickResult

CONTROL_KEYS = ("backend", "result", "message", "updatedAt")


def twin_status_body(
    result: TickResult, stale_keys: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The ``status`` merge patch of a NodeTwin: ``controlStatus.cpu``, and ``.gpu`` when
    the node has a GPU cap; nothing else.

    ``stale_keys`` (observed keys to null, for the profile API) do not apply: no
    ``observed`` is written here.
    """
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    control: dict[str, Any] = {
        "cpu": {
            "backend": result.backend.value,
            "result": result.result.value,
            "message": result.message,
            "updatedAt": now,
        }
    }
    if result.gpu is not None:
        control["gpu"] = {
            "backend": result.gpu.backend.value,
            "result": result.gpu.result.value,
            "message": result.gpu.message,
            "updatedAt": now,
        }
    return {"controlStatus": control}


def object_name(node: str) -> str:
    """The name Joulie gives a node's NodeTwin and NodeHardware.

    Lowercased, ``.``, ``_`` and ``/`` turned into ``-``, leading and trailing
    ``-`` trimmed (as ``sanitizeNodeObjectName`` in Joulie's agent).
    """
    name = node.strip().lower()
    for char in "._/":
        name = name.replace(char, "-")
    return name.strip("-")
