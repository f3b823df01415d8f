"""Custom resources of both APIs: any JSON value in any field gives a valid desired state,
or a ProfileError naming that field; never another exception.

The objects are valid ones with one to three fields replaced by any JSON
value (or removed), so the field an error names can be checked against the
fields that were bent. What is accepted is checked against the input
itself, not against the parser's own helpers.
"""

from __future__ import annotations

import http.client
import math
import urllib.parse
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.errors import ProfileError
from agentpool.resources.desired import GpuCap, PowerPolicy
from agentpool.resources.parse import (
    NPP,
    NT,
    parse_gpu_routing,
    parse_power_profile,
    parse_telemetry_profile,
)
from agentpool.resources.routing import ControlType, GpuRouting, HttpEndpoint, Routing, SourceType
from tests.properties.resources import (
    INFORMATIONAL,
    POWER_PATHS,
    TELEMETRY_PATHS,
    power_profiles,
    telemetry_profiles,
)
from tests.properties.strategies import DELETE, bent, get_path, related
from tests.support.budget import examples

MAX_MESSAGE = 600
"""An error message goes into the object's status: a bad value of any size is shown
shortened, never whole (a megabyte string would make the status write fail)."""


def _finite_number(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and abs(value) <= 1.7976931348623157e308
        and not math.isnan(value)
    )


def check_policy(policy: PowerPolicy, obj: dict[str, Any], kind: str) -> None:
    """An accepted desired state holds exactly the valid values of the input."""
    spec = obj["spec"]
    assert policy.kind == kind
    assert isinstance(spec["nodeName"], str)
    assert spec["nodeName"] == policy.node_name != ""
    assert spec["profile"] in ("performance", "eco")
    assert policy.profile.value == spec["profile"]
    cpu = spec.get("cpu") or {}
    watts = cpu.get("packagePowerCapWatts")
    if watts is None:
        assert policy.cap_watts is None
    else:
        assert _finite_number(watts)
        assert watts >= 1
        assert policy.cap_watts == float(watts)
        assert math.isfinite(policy.cap_watts)
    pct = cpu.get("packagePowerCapPctOfMax")
    if pct is None:
        assert policy.cap_pct is None
    else:
        assert _finite_number(pct)
        assert 0 < pct <= 100
        assert policy.cap_pct == float(pct)
    check_gpu_cap(policy.gpu_cap, get_path(obj, "spec.gpu.powerCap"))


def check_gpu_cap(cap: GpuCap | None, block: Any) -> None:
    if block is DELETE or block is None:
        assert cap is None
        return
    watts, pct = block.get("capWattsPerGpu"), block.get("capPctOfMax")
    if watts is not None:
        assert _finite_number(watts)
        assert watts > 0
        assert cap == GpuCap(watts_per_gpu=float(watts))
    elif pct is not None:
        assert _finite_number(pct)
        assert 0 < pct <= 100
        assert cap == GpuCap(pct_of_max=float(pct))
    else:
        assert cap is None


def missing_in_a_made_block(field: str, obj: dict[str, Any], bent_paths: list[str]) -> bool:
    """``field`` is a required key (a block's ``type``, an ``http`` block's ``endpoint``)
    missing from a block a bend made: bending ``x.http`` where there was no ``x`` leaves
    an ``x`` without the type the CRD requires."""
    block = field.rpartition(".")[0]
    return (
        field.endswith((".type", ".http.endpoint"))
        and get_path(obj, field) is DELETE
        and any(p.startswith(block + ".") for p in bent_paths)
    )


def check_error(
    exc: ProfileError, kind: str, bent_paths: list[str], obj: dict[str, Any] | None = None
) -> None:
    assert exc.kind == kind
    assert related(exc.field, [p for p in bent_paths if p not in INFORMATIONAL]) or (
        obj is not None and missing_in_a_made_block(exc.field, obj, bent_paths)
    ), (exc.field, bent_paths)
    assert f": {exc.field}: " in str(exc)
    assert len(str(exc)) <= MAX_MESSAGE, len(str(exc))


@pytest.mark.parametrize("kind", [NPP, NT])
@settings(max_examples=examples(400))
@given(case=bent(power_profiles(), POWER_PATHS))
def test_any_value_in_any_field_of_a_power_profile(
    kind: str, case: tuple[dict[str, Any], list[str]]
) -> None:
    obj, paths = case
    try:
        policy = parse_power_profile(obj, kind=kind)
    except ProfileError as exc:
        check_error(exc, kind, paths)
        return
    check_policy(policy, obj, kind)


def check_endpoint(endpoint: HttpEndpoint | None, block: Any) -> None:
    """An accepted endpoint is one the standard library can send a request to."""
    assert endpoint is not None
    assert isinstance(block, dict)
    assert 0 < endpoint.timeout_s <= 300
    assert math.isfinite(endpoint.timeout_s)
    url = endpoint.url("worker-0")
    parts = urllib.parse.urlsplit(url)  # the oracle: stdlib parsing, not the agent's
    assert parts.scheme in ("http", "https")
    assert parts.hostname
    assert parts.port is None or 0 < parts.port <= 65535
    http.client.HTTPConnection(parts.netloc)  # raises InvalidURL for a port it cannot use
    assert not any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url), url


def check_routing(routing: Routing, obj: dict[str, Any]) -> None:
    if routing.source is SourceType.HTTP:
        check_endpoint(routing.source_http, get_path(obj, "spec.sources.cpu.http"))
    if routing.control is ControlType.HTTP:
        check_endpoint(routing.control_http, get_path(obj, "spec.controls.cpu.http"))


def check_gpu_routing(routing: GpuRouting, obj: dict[str, Any]) -> None:
    if routing.control is ControlType.HTTP:
        check_endpoint(routing.control_http, get_path(obj, "spec.controls.gpu.http"))
    if routing.telemetry_http is not None:
        source = get_path(obj, "spec.sources.gpu.http")
        if source is DELETE or not isinstance(source, dict) or "endpoint" not in source:
            source = get_path(obj, "spec.sources.cpu.http")
        check_endpoint(routing.telemetry_http, source)


@settings(max_examples=examples(400))
@given(case=bent(telemetry_profiles(), TELEMETRY_PATHS))
def test_any_value_in_any_field_of_a_telemetry_profile(
    case: tuple[dict[str, Any], list[str]],
) -> None:
    obj, paths = case
    try:
        check_routing(parse_telemetry_profile(obj), obj)
    except ProfileError as exc:
        check_error(exc, "TelemetryProfile", paths, obj)
    try:
        check_gpu_routing(parse_gpu_routing(obj), obj)
    except ProfileError as exc:
        check_error(exc, "TelemetryProfile", paths, obj)


endpoint_texts = st.builds(
    "{}{}{}{}{}".format,
    st.sampled_from(["http://", "https://", "HTTP://", "ftp://", "", "http:/", "http:///"]),
    st.sampled_from(["sim", "127.0.0.1", "[::1]", "[", "[::1", "", "a b", "é", "x\n"]) | st.text(
        max_size=6
    ),
    st.sampled_from(["", ":", ":80", ":0", ":65536", ":abc", ":-1", ": 80", ":8_0", ":٣"]),
    st.sampled_from(["", "/", "/{node}", "/a b", "/\x00", "?q=1", "#f"]) | st.text(max_size=6),
    st.just(""),
)


@settings(max_examples=examples(300))
@given(text=endpoint_texts, timeout=st.one_of(st.sampled_from([0, 1, 300, 300.5]), st.floats()))
def test_any_endpoint_text_is_usable_or_refused_naming_it(text: str, timeout: float) -> None:
    obj = {
        "metadata": {"name": "tp"},
        "spec": {
            "target": {"scope": "node", "nodeName": "worker-0"},
            "controls": {"cpu": {"type": "http", "http": {"endpoint": text,
                                                          "timeoutSeconds": timeout}}},
        },
    }
    try:
        routing = parse_telemetry_profile(obj)
    except ProfileError as exc:
        assert exc.field in (
            "spec.controls.cpu.http.endpoint",
            "spec.controls.cpu.http.timeoutSeconds",
        )
        return
    check_endpoint(routing.control_http, obj["spec"]["controls"]["cpu"]["http"])
