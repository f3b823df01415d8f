"""The chart's CustomResourceDefinitions, by kind, and walks over their schemas."""

from __future__ import annotations

from typing import Any

import yaml

from tests.support.chart import CHART_DIR

GROUP = "joulie.io"
VERSION = "v1alpha1"


def load_crds() -> dict[str, dict[str, Any]]:
    crds: dict[str, dict[str, Any]] = {}
    for path in sorted((CHART_DIR / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            crds[doc["spec"]["names"]["kind"]] = doc
    return crds


CRDS = load_crds()


def version_of(kind: str) -> dict[str, Any]:
    (version,) = CRDS[kind]["spec"]["versions"]
    result: dict[str, Any] = version
    return result


def schema_of(kind: str) -> dict[str, Any]:
    result: dict[str, Any] = version_of(kind)["schema"]["openAPIV3Schema"]
    return result


def walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    nodes = [(path, schema)]
    for name, sub in schema.get("properties", {}).items():
        nodes.extend(walk(sub, f"{path}.{name}"))
    if "items" in schema:
        nodes.extend(walk(schema["items"], f"{path}[]"))
    return nodes
