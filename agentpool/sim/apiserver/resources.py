"""The resource types the emulator serves, and the discovery documents about them.

Owns the static table of kinds (core ``nodes``, the cluster-scoped
``joulie.io/v1alpha1`` kinds of both Joulie API generations: the profile API's
NodePowerProfile and TelemetryProfile, the current API's NodeTwin and
NodeHardware, the namespaced built-in ``coordination.k8s.io/v1`` Leases and
``apps/v1`` StatefulSets an elastic pool needs, and the ``events.k8s.io/v1``
Events the agent records on Nodes), which of them a cluster shape
serves (:data:`SHAPES`; the built-in kinds in every shape), and the JSON that
``/api``, ``/apis``, ``/api/v1``, ``/apis/<group>``, ``/apis/<group>/<version>``
and ``/version`` answer. Nothing here holds state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JOULIE_GROUP = "joulie.io"
JOULIE_VERSION = "v1alpha1"
COORDINATION_GROUP = "coordination.k8s.io"
APPS_GROUP = "apps"
EVENTS_GROUP = "events.k8s.io"

# Verbs reported in discovery; kubectl uses them to decide what it may try.
_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class ResourceType:
    """One served kind, cluster-scoped or namespaced."""

    plural: str
    """URL segment and RBAC name, e.g. ``nodes``."""
    singular: str
    kind: str
    group: str
    """``""`` for the core group."""
    version: str
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    """True: ``/status`` exists, writes there change only ``.status`` and
    writes to the object itself ignore ``.status`` (as for a CRD with
    ``subresources: {status: {}}``)."""
    namespaced: bool = False
    """True: objects live in a namespace, reached under ``.../namespaces/<ns>/<plural>``."""
    scale_subresource: bool = False
    """True: ``/scale`` serves an ``autoscaling/v1`` Scale over ``spec.replicas``."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def group_path(self) -> str:
        """``/api/v1`` or ``/apis/<group>/<version>``."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def base_path(self) -> str:
        """The collection URL path (for a namespaced kind: across all namespaces)."""
        return f"{self.group_path}/{self.plural}"

    @property
    def namespaced_path(self) -> str:
        """The collection URL path inside one namespace (aiohttp pattern)."""
        return f"{self.group_path}/namespaces/{{namespace}}/{self.plural}"


NODES = ResourceType("nodes", "node", "Node", "", "v1", ("no",))
NODE_POWER_PROFILES = ResourceType(
    "nodepowerprofiles", "nodepowerprofile", "NodePowerProfile", JOULIE_GROUP, JOULIE_VERSION,
    ("npp",),
)
TELEMETRY_PROFILES = ResourceType(
    "telemetryprofiles", "telemetryprofile", "TelemetryProfile", JOULIE_GROUP, JOULIE_VERSION,
    ("tp",), status_subresource=True,
)

NODE_TWINS = ResourceType(
    "nodetwins", "nodetwin", "NodeTwin", JOULIE_GROUP, JOULIE_VERSION,
    ("nt",), status_subresource=True,
)
NODE_HARDWARES = ResourceType(
    "nodehardwares", "nodehardware", "NodeHardware", JOULIE_GROUP, JOULIE_VERSION,
    ("nhw",), status_subresource=True,
)
LEASES = ResourceType(
    "leases", "lease", "Lease", COORDINATION_GROUP, "v1", namespaced=True,
)
STATEFULSETS = ResourceType(
    "statefulsets", "statefulset", "StatefulSet", APPS_GROUP, "v1", ("sts",),
    status_subresource=True, namespaced=True, scale_subresource=True,
)
EVENTS = ResourceType(
    "events", "event", "Event", EVENTS_GROUP, "v1", ("ev",), namespaced=True,
)
"""``events.k8s.io/v1`` Events, validated as the apiserver does (:mod:`.eventcheck`)."""
BUILT_IN: tuple[ResourceType, ...] = (NODES, LEASES, STATEFULSETS, EVENTS)
"""Kinds every cluster serves, whatever Joulie CRDs it has."""

RESOURCES: tuple[ResourceType, ...] = (
    NODES, NODE_POWER_PROFILES, TELEMETRY_PROFILES, NODE_TWINS, NODE_HARDWARES, LEASES,
    STATEFULSETS, EVENTS,
)

SHAPES: dict[str, tuple[ResourceType, ...]] = {
    "all": RESOURCES,
    "profiles": (*BUILT_IN, NODE_POWER_PROFILES, TELEMETRY_PROFILES),
    "nodetwin": (*BUILT_IN, NODE_TWINS, NODE_HARDWARES),
    "none": BUILT_IN,
}
"""Cluster shapes by name: which kinds a cluster serves. ``profiles`` is a cluster
with the CRDs of an older Joulie operator, ``nodetwin`` one with the current
operator's CRDs only, ``none`` one where no Joulie CRD is installed yet."""
GROUPS: tuple[tuple[str, str], ...] = (
    (JOULIE_GROUP, JOULIE_VERSION), (COORDINATION_GROUP, "v1"), (APPS_GROUP, "v1"),
    (EVENTS_GROUP, "v1"),
)
"""The named API groups, each with its one version, in discovery order."""


def resolve(name: str, served: tuple[ResourceType, ...] = RESOURCES) -> ResourceType:
    """Find a type by plural, singular, kind or short name (``tp``, ``Node``...)."""
    lowered = name.lower()
    for rt in served:
        if lowered in (rt.plural, rt.singular, rt.kind.lower(), *rt.short_names):
            return rt
    raise KeyError(f"unknown resource {name!r}; served: {[rt.plural for rt in served]}")


def _resource_entries(
    group: str, version: str, served: tuple[ResourceType, ...]
) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for rt in served:
        if (rt.group, rt.version) != (group, version):
            continue
        entries.append({
            "name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
            "kind": rt.kind, "verbs": _VERBS, "shortNames": list(rt.short_names),
        })
        if rt.status_subresource:
            entries.append({
                "name": f"{rt.plural}/status", "singularName": "", "namespaced": rt.namespaced,
                "kind": rt.kind, "verbs": ["get", "patch", "update"],
            })
        if rt.scale_subresource:
            entries.append({
                "name": f"{rt.plural}/scale", "singularName": "", "namespaced": rt.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            })
    return entries


def resource_list(
    group: str, version: str, served: tuple[ResourceType, ...] = RESOURCES
) -> dict[str, Any]:
    """``APIResourceList`` for ``/api/v1`` or ``/apis/<group>/<version>``."""
    return {
        "kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": _resource_entries(group, version, served),
    }


def serves_group(served: tuple[ResourceType, ...]) -> bool:
    """Whether any ``joulie.io`` kind is served (else the group is absent, as on a
    cluster without the CRDs: ``/apis/joulie.io/...`` answers 404)."""
    return any(rt.group == JOULIE_GROUP for rt in served)


def core_versions(server_address: str) -> dict[str, Any]:
    """``APIVersions`` for ``/api``."""
    return {
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address},
        ],
    }


def api_group(group: str = JOULIE_GROUP, version: str = JOULIE_VERSION) -> dict[str, Any]:
    """``APIGroup`` for ``/apis/<group>``."""
    gv = {"groupVersion": f"{group}/{version}", "version": version}
    return {
        "kind": "APIGroup", "apiVersion": "v1", "name": group,
        "versions": [gv], "preferredVersion": gv,
    }


def api_group_list(served: tuple[ResourceType, ...] = RESOURCES) -> dict[str, Any]:
    """``APIGroupList`` for ``/apis``: the groups of :data:`GROUPS` with a served kind."""
    groups = []
    for group, version in GROUPS:
        if not any(rt.group == group for rt in served):
            continue  # our CRD group on a cluster without the CRDs
        entry = api_group(group, version)
        del entry["kind"], entry["apiVersion"]
        groups.append(entry)
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def version_info() -> dict[str, str]:
    """``/version``: claims a recent minor so version-gated clients take modern paths."""
    return {
        "major": "1", "minor": "30", "gitVersion": "v1.30.0-agentpool-emulator",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "none (Python emulator)",
        "compiler": "none", "platform": "linux/amd64",
    }
