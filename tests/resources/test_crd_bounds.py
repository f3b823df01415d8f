"""Every bound the chart's CRDs put on a number of the desired state, against the parser.

A value the API server admits must parse, and one it refuses must not (a
parser stricter than its CRD rejects what the operator wrote; a looser one
enforces what a real server would never store). Each bounded number is tried
on both sides of each of its bounds, through the real schema and the agent's
own parser; a new bound in a CRD without a row here fails the test.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from agentpool.errors import ProfileError
from agentpool.resources.parse import (
    NT,
    parse_gpu_routing,
    parse_power_profile,
    parse_telemetry_profile,
)

CRDS = Path(__file__).resolve().parents[2] / "charts" / "joulie" / "crds"


def _schema(kind: str) -> dict[str, Any]:
    for path in CRDS.glob("*.yaml"):
        doc = yaml.safe_load(path.read_text())
        if doc["spec"]["names"]["kind"] == kind:
            (version,) = doc["spec"]["versions"]
            schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
            return schema
    raise LookupError(kind)


def _bounded(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if schema.get("type") == "number" and ("minimum" in schema or "maximum" in schema):
        yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from _bounded(sub, f"{path}.{name}" if path else name)


def _with(obj: dict[str, Any], path: str, value: float) -> dict[str, Any]:
    result = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node = result
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return result


NPP = {"metadata": {"name": "n"}, "spec": {"nodeName": "n", "profile": "eco"}}
TWIN = {"metadata": {"name": "n"}, "spec": {"nodeName": "n", "profile": "eco"}}
TP = {
    "metadata": {"name": "n"},
    "spec": {
        "target": {"scope": "node", "nodeName": "n"},
        "sources": {"cpu": {"type": "http", "http": {"endpoint": "http://s/t"}},
                    "gpu": {"type": "http", "http": {"endpoint": "http://s/t"}}},
        "controls": {"cpu": {"type": "http", "http": {"endpoint": "http://s/c"}},
                     "gpu": {"type": "http", "http": {"endpoint": "http://s/c"}}},
    },
}


def _routing(obj: dict[str, Any]) -> object:
    return parse_telemetry_profile(obj), parse_gpu_routing(obj)


PARSERS: dict[str, tuple[dict[str, Any], Callable[[dict[str, Any]], object]]] = {
    "NodePowerProfile": (NPP, parse_power_profile),
    "NodeTwin": (TWIN, lambda obj: parse_power_profile(obj, NT)),
    "TelemetryProfile": (TP, _routing),
}
FIELDS = {
    ("NodePowerProfile", "spec.cpu.packagePowerCapWatts"),
    ("NodePowerProfile", "spec.cpu.packagePowerCapPctOfMax"),
    ("NodePowerProfile", "spec.gpu.powerCap.capWattsPerGpu"),
    ("NodePowerProfile", "spec.gpu.powerCap.capPctOfMax"),
    ("NodeTwin", "spec.cpu.packagePowerCapWatts"),
    ("NodeTwin", "spec.cpu.packagePowerCapPctOfMax"),
    ("NodeTwin", "spec.gpu.powerCap.capWattsPerGpu"),
    ("NodeTwin", "spec.gpu.powerCap.capPctOfMax"),
    ("TelemetryProfile", "spec.sources.cpu.http.timeoutSeconds"),
    ("TelemetryProfile", "spec.sources.gpu.http.timeoutSeconds"),
    ("TelemetryProfile", "spec.controls.cpu.http.timeoutSeconds"),
    ("TelemetryProfile", "spec.controls.gpu.http.timeoutSeconds"),
}
"""The numbers of the desired state the parser reads and bounds (the parser's side)."""


UNREAD = ("spec.sources.thermal.", "spec.sources.context.")
"""Accepted by the TelemetryProfile CRD for Joulie's operator; the agent reads neither."""


def _spec_bounds(kind: str) -> dict[str, dict[str, Any]]:
    bounded = _bounded(_schema(kind))
    return {p: s for p, s in bounded if p.startswith("spec.") and not p.startswith(UNREAD)}


def test_every_bounded_number_of_a_desired_state_is_a_parsed_one() -> None:
    declared = {(kind, path) for kind in PARSERS for path in _spec_bounds(kind)}
    # Both ways: a CRD bound the parser ignores, or a parsed number the CRD does not declare
    # (a real server would prune it before the agent ever saw it).
    assert declared == FIELDS


@pytest.mark.parametrize(("kind", "path"), sorted(FIELDS))
def test_the_parser_refuses_exactly_what_the_schema_refuses(kind: str, path: str) -> None:
    schema = _spec_bounds(kind)[path]
    edges = [e for e in (schema.get("minimum"), schema.get("maximum")) if e is not None]
    good, parse = PARSERS[kind]
    for edge in edges:
        for value in (edge - 1, edge - 0.5, edge - 0.001, edge, edge + 0.001, edge + 0.5):
            sample = _with(good, path, value)
            try:
                jsonschema.Draft4Validator(_schema(kind)).validate(sample)
                admitted = True
            except jsonschema.ValidationError:
                admitted = False
            try:
                parse(sample)
                parsed = True
            except ProfileError:
                parsed = False
            assert parsed == admitted, (kind, path, value, admitted)
