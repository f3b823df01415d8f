"""Messages between the supervisor and a worker over their pipe (pickled).

Supervisor -> worker: :class:`NodeInputs` (new desired state: tick now) or
:class:`StopWorker`. Worker -> supervisor: :class:`TickReport` after every
tick (doubles as the heartbeat) and :class:`Stopped` once host values were
restored on the way out.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentpool.model import NodeInputs, TickResult


@dataclass(frozen=True)
class StopWorker:
    """Restore host values and exit 0."""


@dataclass(frozen=True)
class TickReport:
    node: str
    result: TickResult
    duration_s: float


@dataclass(frozen=True)
class Stopped:
    node: str
    problems: tuple[str, ...]
    """Host values that could not be restored (empty when all went back)."""


ToWorker = NodeInputs | StopWorker
FromWorker = TickReport | Stopped
