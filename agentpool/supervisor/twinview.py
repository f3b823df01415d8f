"""The supervisor's view of Joulie's current API: NodeTwins and NodeHardwares, by node.

Fed by the NodeTwin and NodeHardware informers through :class:`ClusterView`.
A node's twin is the NodeTwin whose ``spec.nodeName`` is the node (the
operator names it after the node, sanitised, but the spec is what counts);
when several claim one node the oldest wins and the choice is reported.
NodeHardwares are kept only for what the workers need from them: the node's
CPU package maximum and per-GPU range, for percent caps over HTTP control.

Like the rest of the view, objects are trimmed to what is read (metadata and
spec of twins), so the agent's own status writes, which come back as
MODIFIED events, change no node's inputs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from agentpool.config.options import AgentMode
from agentpool.config.settings import Settings
from agentpool.errors import ProfileError
from agentpool.hardware.nodehardware import FROM_TABLE
from agentpool.jsonnumbers import json_number
from agentpool.kube.api import Resource
from agentpool.kube.informer import Change, InformerEvent, Relisted
from agentpool.kube.nodehardware import HardwareInputs
from agentpool.resources.nodeinputs import GpuRange
from agentpool.resources.parse import cpu_routing, gpu_routing, oldest_claim, spec_node_name
from agentpool.resources.routing import ControlType, SourceType
from agentpool.results import GpuSeen
from agentpool.supervisor.echoes import kept

RESOURCES = (Resource.NODE_TWINS, Resource.NODE_HARDWARES)
POOL_HOST_GPUS = "a pool pod controls nodes remotely: host GPU control works only in daemonset mode"


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _number(value: Any) -> float | None:
    """A positive JSON number, or None."""
    number = json_number(value)
    return number if number is not None and number > 0 else None


def hardware_max_w(obj: dict[str, Any]) -> float | None:
    """The node's CPU package maximum from a NodeHardware: ``maxWattsPerSocket x sockets``.

    None when either is missing: a maximum is never guessed.
    """
    status = obj.get("status")
    cpu = status.get("cpu") if isinstance(status, dict) else None
    if not isinstance(cpu, dict):
        return None
    cap_range = cpu.get("capRange")
    per_socket = (
        _number(cap_range.get("maxWattsPerSocket")) if isinstance(cap_range, dict) else None
    )
    sockets = _number(cpu.get("sockets"))
    if per_socket is None or sockets is None:
        return None
    return per_socket * sockets


def hardware_gpu_range(obj: dict[str, Any]) -> GpuRange | None:
    """The per-GPU range of a NodeHardware's ``status.gpu.capRangePerGpu``: its maximum,
    and its minimum where that is a number of watts below it; None without a maximum.

    None too for a range an agent took from agentpool's table of data sheets (its
    warnings say so): the view then reads the same table, or a catalog mounted since,
    itself, and the status names the table as the range's source, not the NodeHardware.
    """
    status = obj.get("status")
    gpu = status.get("gpu") if isinstance(status, dict) else None
    cap_range = gpu.get("capRangePerGpu") if isinstance(gpu, dict) else None
    if not isinstance(cap_range, dict):
        return None
    warnings = gpu.get("warnings") if isinstance(gpu, dict) else None
    if isinstance(warnings, list) and any(
        isinstance(w, str) and w.startswith(FROM_TABLE) for w in warnings
    ):
        return None
    high = _number(cap_range.get("maxWatts"))
    if high is None:
        return None
    low = json_number(cap_range.get("minWatts"))
    return GpuRange(high, low if low is not None and 0 <= low <= high else None, "NodeHardware")


class TwinView:
    """NodeTwins indexed by ``spec.nodeName``, NodeHardware maxima by node. Not thread safe."""

    def __init__(self) -> None:
        self.twins: dict[str, dict[str, Any]] = {}
        self._by_node: dict[str, set[str]] = defaultdict(set)
        self.hardware_max: dict[str, float | None] = {}
        """By ``spec.nodeName`` of the NodeHardware."""
        self.hardware_gpu: dict[str, GpuRange | None] = {}
        """The same NodeHardwares' per-GPU ranges."""
        self._hardware_node: dict[str, str] = {}
        """NodeHardware name -> its node."""

    def apply(self, event: InformerEvent) -> set[str]:
        """Apply a NodeTwin or NodeHardware event; returns the nodes whose inputs may change."""
        if isinstance(event, Relisted):
            return self._replace(event.resource, event.items)
        return self._change(event)

    def _replace(self, resource: Resource, items: Iterable[dict[str, Any]]) -> set[str]:
        if resource is Resource.NODE_TWINS:
            affected = set(self._by_node)
            self.twins.clear()
            self._by_node.clear()
            for obj in items:
                self._put_twin(obj)
            return affected | set(self._by_node)
        affected = set(self.hardware_max)
        self.hardware_max.clear()
        self.hardware_gpu.clear()
        self._hardware_node.clear()
        for obj in items:
            self._put_hardware(obj)
        return affected | set(self.hardware_max)

    def _change(self, change: Change) -> set[str]:
        name = _name(change.obj)
        if change.resource is Resource.NODE_TWINS:
            affected = self._drop_twin(name)
            if change.kind != "DELETED":
                affected |= self._put_twin(change.obj)
            return affected
        if change.kind == "DELETED" or self._hardware_node.get(name) != spec_node_name(change.obj):
            affected = self._drop_hardware(name)
        else:
            affected = set()  # the same node: only new maxima change its inputs
        if change.kind != "DELETED":
            affected |= self._put_hardware(change.obj)
        return affected

    def _put_twin(self, obj: dict[str, Any]) -> set[str]:
        name = _name(obj)
        self.twins[name] = kept(obj)
        node = spec_node_name(obj)
        if node is None:
            return set()
        self._by_node[node].add(name)
        return {node}

    def _drop_twin(self, name: str) -> set[str]:
        old = self.twins.pop(name, None)
        node = spec_node_name(old) if old is not None else None
        if node is None:
            return set()
        self._by_node[node].discard(name)
        if not self._by_node[node]:
            del self._by_node[node]
        return {node}

    def _put_hardware(self, obj: dict[str, Any]) -> set[str]:
        node = spec_node_name(obj)
        if node is None:
            return set()
        self._hardware_node[_name(obj)] = node
        before = (self.hardware_max.get(node), self.hardware_gpu.get(node))
        self.hardware_max[node] = hardware_max_w(obj)
        self.hardware_gpu[node] = hardware_gpu_range(obj)
        # The agent's own NodeHardware writes come back here; only new maxima matter.
        after = (self.hardware_max[node], self.hardware_gpu[node])
        return {node} if after != before else set()

    def _drop_hardware(self, name: str) -> set[str]:
        node = self._hardware_node.pop(name, None)
        if node is None:
            return set()
        cpu, gpu = self.hardware_max.pop(node, None), self.hardware_gpu.pop(node, None)
        return set() if cpu is None and gpu is None else {node}

    # -- questions -----------------------------------------------------------------------------

    def twin_for(self, node: str) -> tuple[dict[str, Any] | None, str | None]:
        """The node's twin and, when several claim the node, a note saying which won."""
        names = self._by_node.get(node)
        if not names:
            return None, None
        return oldest_claim([self.twins[n] for n in sorted(names)], "NodeTwin", node)

    def has_twin(self, node: str) -> bool:
        return bool(self._by_node.get(node))

    def claims(self, name: str, node: str) -> bool:
        """Whether the NodeTwin ``name`` exists and targets ``node``."""
        return name in self._by_node.get(node, ())

    def twin_name(self, node: str) -> str | None:
        twin, _ = self.twin_for(node)
        return _name(twin) if twin is not None else None


def hardware_inputs(
    settings: Settings,
    node: str,
    node_object: dict[str, Any] | None,
    telemetry_profile: dict[str, Any] | None,
    gpu_seen: GpuSeen | None = None,
) -> HardwareInputs:
    """What a node's NodeHardware depends on; sysfs is read only under host control, the
    GPU libraries only under host GPU control by a daemonset pod (its own node)."""
    try:
        routing = cpu_routing(telemetry_profile, settings.routing)
    except ProfileError:
        routing = settings.routing.cpu  # its worker reports the error; publish what labels say
    try:
        gpu = gpu_routing(telemetry_profile, settings.routing)
    except ProfileError:
        gpu = settings.routing.gpu
    host = routing.control is ControlType.HOST
    gpu_host = gpu.control is ControlType.HOST
    remote = settings.mode is AgentMode.POOL
    obj = node_object or {}
    return HardwareInputs(
        node=node,
        labels=dict(obj.get("labels") or {}),
        capacity=dict(obj.get("capacity") or {}),
        allocatable=dict(obj.get("allocatable") or {}),
        sysfs_root=settings.sysfs_root_for(node) if host else None,
        http_control=routing.control is ControlType.HTTP,
        http_telemetry=routing.source is SourceType.HTTP,
        gpu_control=gpu.control.value,
        gpu_telemetry=gpu.telemetry_http is not None,
        gpu_host=gpu_host and not remote,
        gpu_problem=POOL_HOST_GPUS if gpu_host and remote else None,
        gpu_seen=gpu_seen,
    )
