"""Cluster objects as the informers hand them to the cluster view."""

from __future__ import annotations

from typing import Any

MANAGED = {"joulie.io/managed": "true"}


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels, "resourceVersion": "1"}}


def npp(
    name: str, target: str, cap: float, created: str = "2026-01-01T00:00:00Z"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": created, "resourceVersion": "9"},
        "spec": {"nodeName": target, "profile": "eco", "cpu": {"packagePowerCapWatts": cap}},
    }


def tp(name: str, target: str, status: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"target": {"scope": "node", "nodeName": target}},
        "status": {"control": {"cpu": {"message": status}}},
    }
