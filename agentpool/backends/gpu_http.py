"""The GPU side of the Joulie HTTP protocol (docs/resources.md, "GPU power caps"), as a client.

Control: ``POST`` ``{"node", "action": "gpu.set_power_cap_watts",
"capWattsPerGpu", "ts"}``; a 2xx JSON answer may carry ``result``,
``message`` and ``state`` (``gpuCapWattsPerGpuApplied``,
``gpuCapWattsPerGpuTarget``), honoured like the CPU answers. Telemetry: the
``gpu`` object of the telemetry document. Transport, size limits and error
wrapping are those of :mod:`agentpool.backends.httpclient`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentpool.backends.httpclient import (
    DEFAULT_USER_AGENT,
    ControlAnswer,
    get_telemetry,
    post_action,
)
from agentpool.errors import HttpBackendError, shown
from agentpool.jsonnumbers import json_count, json_number
from agentpool.resources.routing import HttpEndpoint

GPU_ACTION = "gpu.set_power_cap_watts"

MAX_GPUS = 1 << 16
"""More GPUs than this on one node is not a count, it is junk."""


@dataclass(frozen=True)
class GpuTelemetry:
    """The ``gpu`` object of a telemetry answer; a field the endpoint left out is None."""

    present: bool | None = None
    vendor: str | None = None
    count: int | None = None
    power_watts_total: float | None = None
    avg_power_watts_total: float | None = None
    cap_applied: float | None = None
    cap_target: float | None = None
    min_cap: float | None = None
    max_cap: float | None = None
    default_cap: float | None = None


def _watts(url: str, block: dict[str, Any], key: str) -> float | None:
    value = block.get(key)
    if value is None:
        return None
    # "[N/A]", NaN or a negative power is not a reading: refuse it rather than read 0 W.
    watts = json_number(value)
    if watts is None or watts < 0:
        raise HttpBackendError(url, f"gpu.{key} is not a number of watts: {shown(value)}")
    return watts


def read_gpu_telemetry(
    endpoint: HttpEndpoint, node: str, agent: str = DEFAULT_USER_AGENT
) -> GpuTelemetry | None:
    """The ``gpu`` object of the node's telemetry; None when the answer has none."""
    url, payload = get_telemetry(endpoint, node, agent)
    gpu = payload.get("gpu")
    if gpu is None:
        return None
    if not isinstance(gpu, dict):
        raise HttpBackendError(url, f"gpu is not an object: {shown(gpu)}")
    count = gpu.get("count")
    if count is not None and (json_count(count) is None or not 0 <= count <= MAX_GPUS):
        raise HttpBackendError(url, f"gpu.count is not a count: {shown(count)}")
    present = gpu.get("present")
    vendor = gpu.get("vendor")
    return GpuTelemetry(
        present=present if isinstance(present, bool) else None,
        vendor=vendor if isinstance(vendor, str) else None,
        count=count,
        power_watts_total=_watts(url, gpu, "powerWattsTotal"),
        avg_power_watts_total=_watts(url, gpu, "avgPowerWattsTotal"),
        cap_applied=_watts(url, gpu, "capWattsPerGpuApplied"),
        cap_target=_watts(url, gpu, "capWattsPerGpuTarget"),
        min_cap=_watts(url, gpu, "minCapWattsPerGpu"),
        max_cap=_watts(url, gpu, "maxCapWattsPerGpu"),
        default_cap=_watts(url, gpu, "defaultCapWattsPerGpu"),
    )


def post_gpu_cap(
    endpoint: HttpEndpoint, node: str, watts_per_gpu: float, agent: str = DEFAULT_USER_AGENT
) -> ControlAnswer:
    """POST ``gpu.set_power_cap_watts``; honours ``result``/``message``/``state``."""
    return post_action(endpoint, node, GPU_ACTION, {"capWattsPerGpu": watts_per_gpu}, agent)
