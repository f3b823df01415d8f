"""The CPU side of the Joulie HTTP telemetry/control protocol, as a client.

Telemetry: ``GET`` -> JSON with ``packagePowerWatts`` under ``cpu`` or at top
level (the ``cpu`` one wins: on GPU nodes the top level is CPU + GPU), and
the node's maximum as ``cpu.packagePowerMaxWatts``. Control: ``POST``
``{"node", "action", "capWatts", "throttlePct", "ts"}`` with ``action``
:data:`RAPL_ACTION` (``throttlePct`` -1) or :data:`DVFS_ACTION`. The transport
(connections, TLS, the answer) is :mod:`agentpool.backends.httpclient`'s.
"""

from __future__ import annotations

from agentpool.backends.httpclient import (
    DEFAULT_USER_AGENT,
    ControlAnswer,
    get_telemetry,
    post_action,
)
from agentpool.errors import HttpBackendError, shown
from agentpool.jsonnumbers import json_number
from agentpool.resources.routing import HttpEndpoint

RAPL_ACTION = "rapl.set_power_cap_watts"
DVFS_ACTION = "dvfs.set_throttle_pct"


def read_cpu_maximum(
    endpoint: HttpEndpoint, node: str, agent: str = DEFAULT_USER_AGENT
) -> float | None:
    """The node's CPU package maximum, ``cpu.packagePowerMaxWatts`` of the telemetry.

    None when the answer does not carry a positive number: the agent never guesses one.
    """
    _, payload = get_telemetry(endpoint, node, agent)
    cpu = payload.get("cpu")
    watts = json_number(cpu.get("packagePowerMaxWatts")) if isinstance(cpu, dict) else None
    return watts if watts is not None and watts > 0 else None


def read_package_power(
    endpoint: HttpEndpoint, node: str, agent: str = DEFAULT_USER_AGENT
) -> float | None:
    """Watts from the telemetry endpoint; None when the answer has no reading."""
    url, payload = get_telemetry(endpoint, node, agent)
    # On a GPU node the top-level reading is CPU + GPU (Joulie's simulator), so the
    # CPU's own reading wins when the answer has one.
    cpu = payload.get("cpu")
    value = cpu.get("packagePowerWatts") if isinstance(cpu, dict) else None
    if value is None:
        value = payload.get("packagePowerWatts")
    if value is None:
        return None
    # NaN would poison the DVFS EMA for good (every comparison with it is false), so it is
    # refused like any non-number, and so is a negative power, which no meter reads.
    watts = json_number(value)
    if watts is None or watts < 0:
        raise HttpBackendError(url, f"packagePowerWatts is not a number of watts: {shown(value)}")
    return watts


def post_control(
    endpoint: HttpEndpoint,
    node: str,
    action: str,
    cap_watts: float,
    throttle_pct: int,
    agent: str = DEFAULT_USER_AGENT,
) -> ControlAnswer:
    """POST one control action; honours ``result``/``message`` in a JSON answer."""
    fields = {"capWatts": cap_watts, "throttlePct": throttle_pct}
    return post_action(endpoint, node, action, fields, agent)
