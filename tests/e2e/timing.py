"""Each agent container's time to ready, recorded by the tests and printed at the end.

Two views of one start: the agent's own (its log line ``caches synced N s after the
process started``, from the process's start time in ``/proc``) and the kubelet's
(the pod's ``Ready`` condition minus the container's ``startedAt``; both whole
seconds, so +-1 s).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kubernetes import client

_SYNCED = re.compile(r"caches synced (\d+(?:\.\d+)?)s after the process started")


@dataclass(frozen=True)
class Start:
    what: str
    pod: str
    agent_s: float | None
    kubelet_s: float | None


_STARTS: list[Start] = []
_NOTES: list[str] = []


def agent_seconds(log: str) -> float | None:
    """The agent's own time to ready, from its log; None when it has not said yet."""
    match = _SYNCED.search(log)
    return float(match[1]) if match else None


def kubelet_seconds(pod: client.V1Pod) -> float | None:
    ready = next((c for c in pod.status.conditions or [] if c.type == "Ready"), None)
    statuses = pod.status.container_statuses or []
    running = statuses[0].state.running if statuses else None
    if ready is None or ready.status != "True" or running is None:
        return None
    return float((ready.last_transition_time - running.started_at).total_seconds())


def record(what: str, pod: client.V1Pod, log: str) -> Start:
    start = Start(what, pod.metadata.name, agent_seconds(log), kubelet_seconds(pod))
    _STARTS.append(start)
    return start


def note(line: str) -> None:
    """Another measurement, printed as it is after the times to ready."""
    _NOTES.append(line)


def report_lines() -> list[str]:
    def seconds(value: float | None) -> str:
        return "   ?  " if value is None else f"{value:5.2f}s"

    return [
        f"{s.what:<38} {s.pod:<26} agent {seconds(s.agent_s)}  kubelet {seconds(s.kubelet_s)}"
        for s in _STARTS
    ] + _NOTES
