"""Status messages of a node controller that depend on where its settings came from.

The same situation reads differently on each API: a TelemetryProfile's
``controls.cpu.type`` or the ``TELEMETRY_CPU_CONTROL`` variable; a
NodePowerProfile or a NodeTwin. Operators search for these texts, so they
live in one place.
"""

from __future__ import annotations

from agentpool.resources.desired import PowerPolicy
from agentpool.resources.nodeinputs import NodeApi, NodeInputs
from agentpool.resources.parse import NT
from agentpool.resources.routing import Routing


def control_setting(routing: Routing) -> str:
    """Where the CPU control type came from, as a user would look it up."""
    return "controls.cpu.type" if routing.profile_name is not None else "TELEMETRY_CPU_CONTROL"


def no_control(routing: Routing) -> str:
    if routing.profile_name is not None:
        return "controls.cpu.type is none in the TelemetryProfile: no CPU control backend"
    return "TELEMETRY_CPU_CONTROL is none: no CPU control backend"


def why_none(policy: PowerPolicy | None, inputs: NodeInputs) -> str:
    if policy is None:
        if inputs.api is NodeApi.NONE:
            return f"no {NT} or NodePowerProfile targets this node"
        kind = NT if inputs.api is NodeApi.NODETWIN else "NodePowerProfile"
        return f"no {kind} targets this node"
    if policy.kind == NT:
        return (
            f"NodeTwin {policy.source!r} sets neither cpu.packagePowerCapWatts "
            "nor cpu.packagePowerCapPctOfMax"
        )
    return f"NodePowerProfile {policy.source!r} sets no cpu.packagePowerCapWatts"
