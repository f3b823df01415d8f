"""The supervisor's view of the cluster: which nodes it owns and what each one needs.

Fed by the informers (snapshots and changes), it answers two questions:
which nodes this pod must run a controller for (selector re-checked here,
because some servers ignore ``labelSelector`` on watches; shard ownership,
or in an elastic pool the nodes the handoff lets it run; daemonset mode's
single node), and the :class:`NodeInputs` of each, from the API the node
follows (:meth:`ClusterView.api_of`: with ``JOULIE_API=auto`` its NodeTwin if
one exists, else its NodePowerProfile), decided anew at every change, so a
node moves between the APIs with its worker and its cap kept.

Objects are stored trimmed to what the controllers read (spec, name,
creation time, labels). That matters: the agent's own status writes come back
as MODIFIED TelemetryProfile events, and with ``status`` trimmed away they
leave every node's inputs unchanged instead of waking its worker.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from agentpool.config.options import AgentMode, JoulieApi
from agentpool.config.settings import Settings
from agentpool.controller.budget import longest_tick_s
from agentpool.hardware.boards import board_power
from agentpool.hardware.catalog import Catalog
from agentpool.hardware.labels import GPU_PRODUCT_LABELS, first_label, gpu_allocatable
from agentpool.kube.api import Resource
from agentpool.kube.informer import Change, InformerEvent, Relisted
from agentpool.labelselectors import parse_selector
from agentpool.pool.assignment import owns
from agentpool.resources.nodeinputs import GpuRange, NodeApi, NodeInputs
from agentpool.resources.parse import (
    metadata_name,
    oldest_claim,
    spec_node_name,
    target_of,
    target_problem,
)
from agentpool.supervisor import twinview
from agentpool.supervisor.echoes import kept

log = logging.getLogger(__name__)

HEARTBEAT_SLACK_S = 30.0
"""Added to the ticks a worker may legally spend silent."""


def _tp_node(obj: dict[str, Any]) -> str | None:
    scope, node = target_of(obj)
    return node if scope == "node" and node else None


def heartbeat_limit(settings: Settings, telemetry_profile: dict[str, Any] | None) -> float:
    """How long a node's worker may stay silent before it is killed as hung.

    ``HEARTBEAT_TIMEOUT`` when set; otherwise three reconcile intervals plus
    slack, and never less than one interval plus the node's longest legal tick
    (:func:`~agentpool.controller.budget.longest_tick_s`: its TelemetryProfile's
    or the TELEMETRY_* variables' timeouts, CPU and GPU), so a slow but valid
    endpoint is not taken for a hang.
    """
    if settings.heartbeat_timeout_s is not None:
        return settings.heartbeat_timeout_s
    interval = settings.reconcile_interval_s
    tick = longest_tick_s(telemetry_profile, settings.routing)
    return max(3 * interval, interval + tick) + HEARTBEAT_SLACK_S


class ClusterView:
    """Nodes, NodePowerProfiles, TelemetryProfiles (and NodeTwins, NodeHardwares through
    :class:`~agentpool.supervisor.twinview.TwinView`), indexed by node. Not thread safe."""

    def __init__(self, settings: Settings, catalog: Catalog | None = None) -> None:
        self.settings = settings
        self.catalog = catalog
        """The hardware catalog: GPU ranges for percent caps where NodeHardware has none (before
        agentpool's own table)."""
        self.selector = parse_selector(settings.pool_node_selector)
        self.labels: dict[str, dict[str, str]] = {}
        self.gpus: dict[str, dict[str, str]] = {}
        """Per node, the GPU entries of its allocatable (only those: the rest churns)."""
        self.power: dict[str, dict[str, Any]] = {}
        self.telemetry: dict[str, dict[str, Any]] = {}
        self._power_by_node: dict[str, set[str]] = defaultdict(set)
        self._telemetry_by_node: dict[str, set[str]] = defaultdict(set)
        self.twins = twinview.TwinView()
        self.spec_stale = False
        """The desired-state watch has failed for SPEC_READ_TIMEOUT (set by the supervisor)."""
        self.node_objects: dict[str, dict[str, Any]] = {}
        """NodeTwin API: each node's labels, capacity and allocatable (for NodeHardware)."""
        self._selected: frozenset[str] | None = None
        """:meth:`selected`, until the next node event."""
        self.elastic_running: set[str] | None = set() if settings.elastic.lease else None
        """Elastic pool: the nodes the handoff lets this pod run (None: static ownership)."""
        self._misdirected: set[str] = set()
        """TelemetryProfiles whose target names no node (warned about once each)."""

    # -- feeding ---------------------------------------------------------------------------------

    def apply(self, event: InformerEvent) -> set[str]:
        """Apply an informer event; returns the nodes whose inputs or scope may have changed."""
        if event.resource is Resource.NODES:
            self._selected = None
        if event.resource in twinview.RESOURCES:
            return self.twins.apply(event)
        if isinstance(event, Relisted):
            return self._replace(event.resource, event.items)
        return self._change(event)

    def _store(self, resource: Resource) -> dict[str, Any]:
        if resource is Resource.NODES:
            return self.labels
        return self.power if resource is Resource.NODE_POWER_PROFILES else self.telemetry

    def _affected(self, resource: Resource, name: str) -> set[str]:
        if resource is Resource.NODES:
            return {name}
        if resource is Resource.NODE_POWER_PROFILES:
            node = spec_node_name(self.power[name]) if name in self.power else None
        else:
            node = _tp_node(self.telemetry[name]) if name in self.telemetry else None
        return {node} if node else set()

    def _put(self, resource: Resource, obj: dict[str, Any]) -> None:
        name = metadata_name(obj)
        if resource is Resource.NODES:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            self.labels[name] = {str(k): str(v) for k, v in labels.items()}
            self.gpus[name] = gpu_allocatable(obj)
            if self.settings.joulie_api is not JoulieApi.PROFILES:  # NodeHardware's inputs
                status = obj.get("status") or {}
                self.node_objects[name] = {
                    "labels": self.labels[name],
                    "capacity": dict(status.get("capacity") or {}),
                    "allocatable": dict(status.get("allocatable") or {}),
                }
        elif resource is Resource.NODE_POWER_PROFILES:
            self.power[name] = kept(obj)
            if node := spec_node_name(obj):
                self._power_by_node[node].add(name)
        else:
            self.telemetry[name] = kept(obj)
            if node := _tp_node(obj):
                self._telemetry_by_node[node].add(name)
            self._check_target(name, obj)

    def _check_target(self, name: str, obj: dict[str, Any]) -> None:
        problem = target_problem(obj)
        if problem is None:
            self._misdirected.discard(name)
        elif name not in self._misdirected:
            self._misdirected.add(name)
            log.warning("%s; it targets no node and is ignored", problem)

    def _drop(self, resource: Resource, name: str) -> None:
        affected = self._affected(resource, name)
        self._store(resource).pop(name, None)
        index = (
            self._power_by_node
            if resource is Resource.NODE_POWER_PROFILES
            else self._telemetry_by_node
        )
        for node in affected:
            index[node].discard(name)
            if not index[node]:
                del index[node]

    def _change(self, change: Change) -> set[str]:
        name = metadata_name(change.obj)
        affected = self._affected(change.resource, name)
        if change.resource is not Resource.NODES:
            self._drop(change.resource, name)
        if change.kind == "DELETED":
            self._store(change.resource).pop(name, None)
            if change.resource is Resource.TELEMETRY_PROFILES:
                self._misdirected.discard(name)
            if change.resource is Resource.NODES:
                self.gpus.pop(name, None)
                self.node_objects.pop(name, None)
        else:
            self._put(change.resource, change.obj)
        return affected | self._affected(change.resource, name)

    def _replace(self, resource: Resource, items: Iterable[dict[str, Any]]) -> set[str]:
        before = set(self._store(resource))
        affected: set[str] = set()
        for name in before:
            affected |= self._affected(resource, name)
        self._store(resource).clear()
        if resource is Resource.NODES:
            self.gpus.clear()
            self.node_objects.clear()
        if resource is Resource.NODE_POWER_PROFILES:
            self._power_by_node.clear()
        elif resource is Resource.TELEMETRY_PROFILES:
            self._telemetry_by_node.clear()
        for obj in items:
            self._put(resource, obj)
        if resource is Resource.TELEMETRY_PROFILES:
            self._misdirected &= set(self.telemetry)
        for name in self._store(resource):
            affected |= self._affected(resource, name)
        return affected

    # -- questions -------------------------------------------------------------------------------

    def in_scope(self, node: str) -> bool:
        if not self.matches_selector(node):
            return False
        s = self.settings
        if s.mode is AgentMode.DAEMONSET:
            return True
        if self.elastic_running is not None:
            return node in self.elastic_running
        return owns(node, s.pool_shards, s.pool_shard_id)

    def selected(self) -> frozenset[str]:
        """Every node this mode's selector picks, whoever owns it (what a pool shares).

        Asked at every loop turn of an elastic pool, it changes only with the nodes: the
        same object comes back until a node event, so its users' caches compare cheaply.
        """
        if self._selected is None:
            self._selected = frozenset(n for n in self.labels if self.matches_selector(n))
        return self._selected

    def matches_selector(self, node: str) -> bool:
        """Selected by this mode's scope, whichever shard owns it."""
        labels = self.labels.get(node)
        if labels is None:
            return False
        if self.settings.mode is AgentMode.DAEMONSET:
            return node == self.settings.node_name
        return self.selector.matches(labels)

    def owned(self) -> set[str]:
        if self.settings.mode is AgentMode.DAEMONSET:
            name = self.settings.node_name
            return {name} if name is not None and name in self.labels else set()
        return {n for n in self.labels if self.in_scope(n)}

    def _chosen(
        self, store: dict[str, dict[str, Any]], index: dict[str, set[str]], node: str, kind: str
    ) -> tuple[dict[str, Any] | None, str | None]:
        names = index.get(node)
        if not names:
            return None, None
        return oldest_claim([store[n] for n in sorted(names)], kind, node)

    def telemetry_profile_name(self, node: str) -> str | None:
        chosen, _ = self._chosen(self.telemetry, self._telemetry_by_node, node, "TelemetryProfile")
        return metadata_name(chosen) if chosen else None

    def api_of(self, node: str) -> NodeApi:
        """The API ``node`` follows: the one ``JOULIE_API`` names; with ``auto``, the NodeTwin
        API if a NodeTwin targets the node, else the profile API if a NodePowerProfile does."""
        setting = self.settings.joulie_api
        if setting is JoulieApi.NODETWIN:
            return NodeApi.NODETWIN
        if setting is JoulieApi.PROFILES:
            return NodeApi.PROFILES
        if self.twins.has_twin(node):
            return NodeApi.NODETWIN
        return NodeApi.PROFILES if self._power_by_node.get(node) else NodeApi.NONE

    def status_target(self, node: str) -> tuple[Resource, str] | None:
        """Where the node's status goes: its NodeTwin when it follows that API, else its
        TelemetryProfile (none: nowhere)."""
        if self.api_of(node) is NodeApi.NODETWIN:
            twin = self.twins.twin_name(node)
            return (Resource.NODE_TWINS, twin) if twin else None
        profile = self.telemetry_profile_name(node)
        return (Resource.TELEMETRY_PROFILES, profile) if profile else None

    def targets(self, resource: Resource, name: str, node: str) -> bool:
        """Whether this NodeTwin or TelemetryProfile (a status target) exists and targets
        ``node``."""
        if resource is Resource.NODE_TWINS:
            return self.twins.claims(name, node)
        return name in self._telemetry_by_node.get(node, ())

    def describe_api(self, node: str, api: NodeApi) -> str:
        """What the node follows, for the log: the API and the object it reads."""
        setting = f"JOULIE_API={self.settings.joulie_api.value}"
        if api is NodeApi.NODETWIN:
            twin = self.twins.twin_name(node)
            what = f"NodeTwin {twin!r}" if twin else "no NodeTwin targets it yet"
            return f"the NodeTwin API ({what}; {setting})"
        if api is NodeApi.PROFILES:
            profile, _ = self._chosen(self.power, self._power_by_node, node, "NodePowerProfile")
            what = (
                f"NodePowerProfile {metadata_name(profile)!r}" if profile
                else "no NodePowerProfile targets it yet"
            )
            return f"the profile API ({what}; {setting})"
        return f"no API yet: neither a NodeTwin nor a NodePowerProfile targets it ({setting})"

    def _catalog_gpu(self, node: str) -> GpuRange | None:
        """The board power range of the node's GPU product (its product label): the catalog's,
        else agentpool's own table's (:func:`~agentpool.hardware.boards.board_power`)."""
        product = first_label(self.labels.get(node, {}), tuple(GPU_PRODUCT_LABELS))
        board = board_power(product, self.catalog)
        return None if board is None else GpuRange(board.max_watts, board.min_watts, board.source)

    def inputs_for(self, node: str) -> NodeInputs:
        """The node's inputs: the desired state of the API it follows (:meth:`api_of`), the
        routing of a TelemetryProfile targeting it (else the worker uses TELEMETRY_*)."""
        telemetry, _ = self._chosen(
            self.telemetry, self._telemetry_by_node, node, "TelemetryProfile"
        )
        common: dict[str, Any] = {
            "node_name": node,
            "labels": dict(self.labels.get(node, {})),
            "gpu_allocatable": dict(self.gpus.get(node, {})),
            "telemetry_profile": telemetry,
            "hardware_max_w": self.twins.hardware_max.get(node),
            "gpu_range": self.twins.hardware_gpu.get(node) or self._catalog_gpu(node),
            "spec_stale": self.spec_stale,
            "api": self.api_of(node),
        }
        if common["api"] is NodeApi.NODETWIN:
            twin, twin_note = self.twins.twin_for(node)
            return NodeInputs(**common, node_twin=twin, power_profile_note=twin_note)
        power, note = self._chosen(self.power, self._power_by_node, node, "NodePowerProfile")
        return NodeInputs(**common, power_profile=power, power_profile_note=note)
