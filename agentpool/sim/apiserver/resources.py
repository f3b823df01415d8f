"""The resource types the emulator serves, and the discovery documents about them.

Owns the static table of kinds (core ``nodes``, the cluster-scoped
``joulie.io/v1alpha1`` kinds of both Joulie API generations: the profile API's
NodePowerProfile and TelemetryProfile, the current API's NodeTwin and
NodeHardware), which of them a cluster shape serves (:data:`SHAPES`), and the
JSON that ``/api``, ``/apis``, ``/api/v1``, ``/apis/joulie.io/v1alpha1`` and
``/version`` answer. Nothing here holds state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JOULIE_GROUP = "joulie.io"
JOULIE_VERSION = "v1alpha1"

# Verbs reported in discovery; kubectl uses them to decide what it may try.
_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class ResourceType:
    """One served kind. All are cluster-scoped: the agent needs no namespaces."""

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

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def base_path(self) -> str:
        """The collection URL path."""
        if self.group:
            return f"/apis/{self.group}/{self.version}/{self.plural}"
        return f"/api/{self.version}/{self.plural}"


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

RESOURCES: tuple[ResourceType, ...] = (
    NODES, NODE_POWER_PROFILES, TELEMETRY_PROFILES, NODE_TWINS, NODE_HARDWARES,
)

SHAPES: dict[str, tuple[ResourceType, ...]] = {
    "all": RESOURCES,
    "profiles": (NODES, NODE_POWER_PROFILES, TELEMETRY_PROFILES),
    "nodetwin": (NODES, NODE_TWINS, NODE_HARDWARES),
    "none": (NODES,),
}
"""Cluster shapes by name: which kinds a cluster serves. ``profiles`` is a cluster
with the CRDs of an older Joulie operator, ``nodetwin`` one with the current
operator's CRDs only, ``none`` one where no Joulie CRD is installed yet."""


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
            "name": rt.plural, "singularName": rt.singular, "namespaced": False,
            "kind": rt.kind, "verbs": _VERBS, "shortNames": list(rt.short_names),
        })
        if rt.status_subresource:
            entries.append({
                "name": f"{rt.plural}/status", "singularName": "", "namespaced": False,
                "kind": rt.kind, "verbs": ["get", "patch", "update"],
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


def api_group() -> dict[str, Any]:
    """``APIGroup`` for ``/apis/joulie.io``."""
    gv = {"groupVersion": f"{JOULIE_GROUP}/{JOULIE_VERSION}", "version": JOULIE_VERSION}
    return {
        "kind": "APIGroup", "apiVersion": "v1", "name": JOULIE_GROUP,
        "versions": [gv], "preferredVersion": gv,
    }


def api_group_list(served: tuple[ResourceType, ...] = RESOURCES) -> dict[str, Any]:
    """``APIGroupList`` for ``/apis``: only our CRD group (no built-in named groups)."""
    if not serves_group(served):
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}
    group = api_group()
    del group["kind"], group["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}


def version_info() -> dict[str, str]:
    """``/version``: claims a recent minor so version-gated clients take modern paths."""
    return {
        "major": "1", "minor": "30", "gitVersion": "v1.30.0-agentpool-emulator",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "none (Python emulator)",
        "compiler": "none", "platform": "linux/amd64",
    }
