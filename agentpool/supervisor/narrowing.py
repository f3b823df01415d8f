"""What each informer asks the server for, and what it keeps: a pod's cost follows its nodes.

A pod must not pay for the cluster around it: not in memory (objects of nodes it
does not control), not in CPU (their events decoded), and, where the server can
filter, not in what the API server sends it. So each kind's informer gets the
narrowest request the server answers and, for what the server cannot filter, a
``keep`` test that drops an object before it is queued (docs/modes.md: "What a
pod costs as the cluster grows"):

============  ======================  ==========================  ===========================
mode          kind                    asked of the server          kept
============  ======================  ==========================  ===========================
daemonset     nodes                   ``metadata.name=NODE_NAME``  everything
daemonset     nodetwins,              ``metadata.name=`` the name  ``spec.nodeName`` is
              nodehardwares           Joulie gives the node's      NODE_NAME
                                      objects
daemonset     nodepowerprofiles,      every object, in pages       those targeting NODE_NAME
              telemetryprofiles
static pool   nodes                   ``POOL_NODE_SELECTOR``       the shard's (by name,
                                                                   before decoding)
static pool,  nodes                   listed: the selector's       as a static pool's
16+ shards                            names (a Table), then each
                                      owned node by name; watched
                                      as a static pool's
static pool,  nodetwins,              for each owned node, its     as a daemonset pod's,
16+ shards,   nodehardwares           object by ``metadata.name``  for each node
at most 64
owned nodes
static pool   the Joulie kinds        every object, in pages       those targeting a node of
                                                                   the shard
elastic pool  every kind              as a static pool's           everything
============  ======================  ==========================  ===========================

Why by name for NodeTwin and NodeHardware: Joulie's operator names a NodeTwin
after its node and the agent names NodeHardware so (``node_object_name``), and
they are the kinds written all the time (the operator's status every minute,
every agent's heartbeats), so a daemonset pod must receive none of other nodes'.
A NodeTwin of another name that targets the node is not seen by a daemonset pod
(Joulie's own agent writes its status only to the one named after the node).
The profile API's objects are named by hand or by older operators
(``node-<name>``), and change seldom: those a daemonset pod still receives
whole, decodes and drops. A shard is no selector a server knows, but names are: a
pod of a static pool of many shards that owns few nodes watches each one's NodeTwin and
NodeHardware by name (:mod:`agentpool.supervisor.nodefamily`, :data:`BY_NAME_MAX_NODES`);
any other pool pod receives every object of the Joulie kinds and keeps its shard's. An
elastic pool's share moves with its members, so it keeps everything. Whatever is kept is
cut down at once to what the cluster view reads (:data:`TRIMS`). A pod of a static pool of
16 or more shards, whatever it owns, also lists its Nodes names first
(:mod:`agentpool.kube.namesfirst`): every name the selector picks, then each owned node,
instead of every selected node whole to keep one in ``POOL_SHARDS``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentpool.config.options import AgentMode
from agentpool.config.settings import Settings
from agentpool.kube.api import Resource
from agentpool.kube.nodehardware import node_object_name
from agentpool.pool.assignment import owns
from agentpool.resources.parse import metadata_name, spec_node_name, target_of, target_problem
from agentpool.supervisor.echoes import kept

Wants = Callable[[str], bool]
"""Whether this pod wants a node's objects."""

BY_NAME_MAX_NODES = 64
"""A pod of a pool of :data:`BY_NAME_MIN_SHARDS` or more shards that owns at most this many
nodes watches :data:`BY_NAME` node by node.

Each such watch holds a thread and a connection and reconnects every watch timeout: per
owned node (two watches) about 0.25 MiB and 0.05 to 0.1 ms/s of CPU, measured in an agent
pod (BENCHMARKS.md, ``clustersize.py``). Watching a kind whole instead costs the pod about
200 us of CPU for each write about another node, and a cluster of N nodes writes their
statuses about N/50 times a second. At 64 nodes the watches cost 16 MiB and 3 to 6 ms/s,
what receiving the other nodes' writes costs on a cluster of 1,000 to 1,500 nodes."""

BY_NAME_MIN_SHARDS = 16
"""Below this many shards a pod owns too large a share of the cluster for watches by name to
pay: with 64 nodes or fewer each, the cluster is too small for its other nodes' writes to
cost more than the watches (the chart's default, 2 shards, always watches whole).

From this many shards a pod also lists its Nodes names first: a Table of names costs about
0.1 ms a node and a read by name 1 to 2.3 ms, against 0.35 ms a node for the list whole
(real kube-apiserver, 5,000 nodes of 14 KB), so reading the owned share by name pays below
one node in four to nine; one in 16 leaves a margin."""

BY_NAME = (Resource.NODE_TWINS, Resource.NODE_HARDWARES)
"""The kinds named after their node (``node_object_name``) and written all the time."""


@dataclass(frozen=True)
class KindScope:
    """One informer's request and filter."""

    label_selector: str | None = None
    field_selector: str | None = None
    keep: Callable[[dict[str, Any]], bool] | None = None
    """Whether an object concerns this pod; None: every object does."""
    wants: Wants | None = None
    """The nodes ``keep`` keeps the objects of: events about others are passed over
    undecoded (:class:`~agentpool.kube.informer.Informer`)."""
    trim: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """What of each object the cluster view reads; the rest is dropped at once."""
    names_first: bool = False
    """List every name, then each wanted object by name (:mod:`agentpool.kube.namesfirst`):
    where the pod wants few of many."""


def wanted_nodes(settings: Settings) -> Wants | None:
    """The nodes whose objects this pod keeps; None: every node's."""
    if settings.mode is AgentMode.DAEMONSET:
        mine = settings.node_name
        return lambda node: node == mine
    if settings.elastic.lease or settings.pool_shards <= 1:
        return None
    shards, shard = settings.pool_shards, settings.pool_shard_id
    return lambda node: owns(node, shards, shard)


def _targeting(wants: Wants) -> Callable[[dict[str, Any]], bool]:
    def keep(obj: dict[str, Any]) -> bool:
        node = spec_node_name(obj)
        return node is not None and wants(node)

    return keep


def _telemetry(wants: Wants) -> Callable[[dict[str, Any]], bool]:
    def keep(obj: dict[str, Any]) -> bool:
        scope, node = target_of(obj)
        if scope == "node" and node:
            return wants(node)
        return target_problem(obj) is not None  # kept to be warned about, once

    return keep


def _part(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _node(obj: dict[str, Any]) -> dict[str, Any]:
    """A Node as the cluster view reads it: labels, capacity, allocatable (a real one's
    images and conditions are most of its 14 KB)."""
    meta, status = _part(obj, "metadata"), _part(obj, "status")
    return {
        "metadata": {"name": meta.get("name"), "labels": meta.get("labels")},
        "status": {"capacity": status.get("capacity"), "allocatable": status.get("allocatable")},
    }


def _hardware(obj: dict[str, Any]) -> dict[str, Any]:
    """A NodeHardware as the cluster view reads it: its node, CPU and GPU ranges."""
    status = _part(obj, "status")
    return {
        "metadata": {"name": _part(obj, "metadata").get("name")},
        "spec": obj.get("spec"),
        "status": {"cpu": status.get("cpu"), "gpu": status.get("gpu")},
    }


TRIMS: dict[Resource, Callable[[dict[str, Any]], dict[str, Any]]] = {
    Resource.NODES: _node,
    Resource.NODE_HARDWARES: _hardware,
    Resource.NODE_TWINS: kept,
    Resource.NODE_POWER_PROFILES: kept,
    Resource.TELEMETRY_PROFILES: kept,
}
"""What the cluster view reads of each kind (:mod:`agentpool.supervisor.clusterview`,
:mod:`agentpool.supervisor.twinview`); status the agent writes itself is never read."""


def kind_scope(settings: Settings, kind: Resource) -> KindScope:
    """What the informer of ``kind`` asks for and keeps (the module docstring's table)."""
    return dataclasses.replace(_narrowed(settings, kind), trim=TRIMS[kind])


def _narrowed(settings: Settings, kind: Resource) -> KindScope:
    wants = wanted_nodes(settings)
    daemonset = settings.mode is AgentMode.DAEMONSET
    if kind is Resource.NODES:
        if daemonset:
            return KindScope(field_selector=f"metadata.name={settings.node_name}")
        if wants is None:
            return KindScope(label_selector=settings.pool_node_selector)
        node_wanted = wants
        return KindScope(
            label_selector=settings.pool_node_selector,
            keep=lambda obj: node_wanted(metadata_name(obj)),
            wants=node_wanted,
            names_first=settings.pool_shards >= BY_NAME_MIN_SHARDS,
        )
    if wants is None:
        return KindScope()
    if kind is Resource.TELEMETRY_PROFILES:
        return KindScope(keep=_telemetry(wants), wants=wants)
    if daemonset and kind in BY_NAME:
        return _one_node(settings.node_name or "")
    return KindScope(keep=_targeting(wants), wants=wants)


def by_node(settings: Settings, kind: Resource) -> bool:
    """Whether this pod watches ``kind`` node by node while it owns few nodes (the NodeTwins
    and NodeHardwares of a static pool of many shards; :mod:`agentpool.supervisor.nodefamily`)."""
    return (
        settings.mode is not AgentMode.DAEMONSET
        and kind in BY_NAME
        and wanted_nodes(settings) is not None
        and settings.pool_shards >= BY_NAME_MIN_SHARDS
    )


def node_scope(kind: Resource, node: str) -> KindScope:
    """The informer of one node's object of ``kind`` (one of :data:`BY_NAME`)."""
    return dataclasses.replace(_one_node(node), trim=TRIMS[kind])


def _one_node(node: str) -> KindScope:
    """The object Joulie names after ``node``, kept if it targets the node."""

    def mine(name: str) -> bool:
        return name == node

    return KindScope(
        field_selector=f"metadata.name={node_object_name(node)}",
        keep=_targeting(mine),
        wants=mine,
    )
