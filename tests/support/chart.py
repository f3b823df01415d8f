"""Helpers of the deployment tests: the chart, rendered by the real Helm engine.

``helm-python-sdk`` binds Helm's own Go SDK (a bundled ``libhelm_c``), so these
renders are what ``helm template`` / ``helm install`` produce. When that shared
library cannot load on a machine, the chart tests skip with the loader's reason
instead of pretending.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "charts" / "joulie"
RELEASE = "joulie"
NAMESPACE = "joulie-system"
PREVIOUS_CHART = Path(__file__).parent / "charts" / "joulie-0.1.0.tgz"
"""The chart before 0.2.0 gave the agent pods Joulie's label (in their immutable selector),
as a chart repository would serve it: charts/joulie at 41a6a4e, packaged by Helm's SDK
(``git archive 41a6a4e charts/joulie | tar -x``, then ``helm_python.package``). What the
upgrade tests upgrade from; a copy, so that it needs no git history."""

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]


def load_helm() -> Any:
    """Import helm_python and touch the native library, or skip with the reason."""
    try:
        import helm_python

        helm_python.helm_sdk_version()
    except (ImportError, OSError) as exc:
        pytest.skip(f"helm-python-sdk cannot load Helm's native library here: {exc}")
    except Exception as exc:  # HelmLibraryError: version or symbol mismatch
        if type(exc).__name__ != "HelmLibraryError":
            raise
        pytest.skip(f"helm-python-sdk cannot load Helm's native library here: {exc}")
    return helm_python


def parse_manifests(rendered: dict[str, str]) -> list[Manifest]:
    """All objects of a render, in template order (NOTES.txt is not YAML)."""
    objects: list[Manifest] = []
    for path in sorted(rendered):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(rendered[path]) if doc)
    return objects


def find(objects: list[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    return [
        obj
        for obj in objects
        if obj["kind"] == kind and (name is None or obj["metadata"]["name"] == name)
    ]


def one(objects: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def container(workload: Manifest) -> Manifest:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: Manifest = containers[0]
    return result


def env_of(workload: Manifest) -> dict[str, Any]:
    """name -> value, or name -> {"fieldRef": path} for downward-API variables."""
    env: dict[str, Any] = {}
    for var in container(workload)["env"]:
        assert var["name"] not in env, f"{var['name']} set twice"
        if "valueFrom" in var:
            env[var["name"]] = {"fieldRef": var["valueFrom"]["fieldRef"]["fieldPath"]}
        else:
            env[var["name"]] = var["value"]
    return env


def agent_workload(objects: list[Manifest]) -> Manifest:
    workloads = find(objects, "DaemonSet") + find(objects, "StatefulSet")
    assert len(workloads) == 1
    return workloads[0]


# Tests of what the chart renders the same in either mode.
BOTH_MODES = pytest.mark.parametrize("mode", ["daemonset", "pool"])
