"""The chart's CRD schemas and the agent's parser agree, bound for bound, on a real API server.

Each example is a valid NodePowerProfile, NodeTwin or TelemetryProfile with
one to three of the fields the parser reads replaced (values around the
bounds: at, just inside and just outside 0, 1, 100 and 300; wrong types) or
removed. The real kube-apiserver judges it by a server-side dry-run create
(``?dryRun=All``: validated and defaulted as if stored, nothing is stored),
the parser judges the same object, and the two verdicts must match:

- parser-accepted but schema-refused: never. The agent must not act on an
  object a real cluster could not hold.
- schema-accepted but parser-refused: only for the agent-side checks listed
  in :data:`AGENT_SIDE`, which the schema cannot state. The chart's CRDs
  carry no CEL rules a 1.20 server evaluates, so these stay the agent's.

Out of the property, on purpose: ``metadata`` (the server's own rules,
not the CRD's); the fields the agent never interprets (``INFORMATIONAL``:
``spec.policy.name``, ``spec.gpu.powerCap.scope``, ``spec.scheduling``, shown
or ignored, never a reason to refuse); and a TelemetryProfile's ``target``
(matched to a node, not parsed: one naming no node applies to none, which is
no error), and likewise a NodeTwin's ``spec.nodeName`` where it names no node.
Values are JSON a server can carry (finite, within int64/float64).

Skipped, with how to get the binaries, without ``KUBEBUILDER_ASSETS``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.rest import ApiException

from agentpool.errors import ProfileError
from agentpool.resources.parse import (
    NPP,
    NT,
    TP,
    parse_gpu_routing,
    parse_power_profile,
    parse_telemetry_profile,
)
from agentpool.sim.envtest import EnvtestServer
from tests.properties.resources import (
    INFORMATIONAL,
    POWER_PATHS,
    TELEMETRY_PATHS,
    power_profiles,
    telemetry_profiles,
)
from tests.properties.strategies import DELETE, bent, finite_json_values, get_path
from tests.support.apiservers import kube_client
from tests.support.budget import examples

GROUP, VERSION = "joulie.io", "v1alpha1"
PLURALS = {NPP: "nodepowerprofiles", NT: "nodetwins", TP: "telemetryprofiles"}

BOUNDS = (0.0, 1.0, 100.0, 300.0)
near_bounds: st.SearchStrategy[Any] = st.sampled_from(
    [
        v
        for b in BOUNDS
        for v in (b, -b, math.nextafter(b, -math.inf), math.nextafter(b, math.inf),
                  b - 1e-6, b + 1e-6, int(b), int(b) + 1, int(b) - 1)
    ]
    + [5e-324, 1e-300, 1e308, 1.7976931348623157e308, 2**63 - 1, -(2**63)]
)  # fmt: skip
"""Numbers at, just inside and just outside every bound of the schemas."""

values = st.one_of(near_bounds, finite_json_values)


def _endpoint_check(exc: ProfileError, obj: dict[str, Any]) -> bool:
    """``http.endpoint`` must be an http(s) URL with a host: the schema says only
    ``minLength: 1`` (a format check needs a CEL rule)."""
    value = get_path(obj, exc.field)
    return exc.field.endswith(".http.endpoint") and isinstance(value, str) and value != ""


def _http_needed_check(exc: ProfileError, obj: dict[str, Any]) -> bool:
    """A block of type ``http`` needs its ``http`` block: the schema requires ``endpoint``
    only inside one (saying "http when type is http" needs a CEL rule)."""
    block = exc.field.removesuffix(".http.endpoint")
    return (
        exc.field.endswith(".http.endpoint")
        and get_path(obj, f"{block}.type") == "http"
        and get_path(obj, f"{block}.http") is DELETE
    )


AGENT_SIDE: dict[str, Callable[[ProfileError, dict[str, Any]], bool]] = {
    "an endpoint that is not an http(s) URL with a host": _endpoint_check,
    "type http without an http block": _http_needed_check,
}
"""Agent-side checks the schema cannot state: the only reasons the parser may refuse what
the API server accepts. Each is recognised by the field the error names and that field's
value (not by the message), so a refusal for any other reason fails the property."""


def parse(kind: str, obj: dict[str, Any]) -> ProfileError | None:
    """The parser's verdict: None when it accepts, its error when it refuses."""
    try:
        if kind == TP:
            parse_telemetry_profile(obj)
            parse_gpu_routing(obj)
        else:
            parse_power_profile(obj, kind=kind)
    except ProfileError as exc:
        return exc
    return None


class Server:
    """The real API server's verdict through the real client, by dry-run create."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api_client)

    def refusal(self, kind: str, obj: dict[str, Any]) -> str | None:
        """None when the server would store ``obj`` (the object as it would be stored goes
        to ``self.stored``); the server's message when it refuses it as invalid."""
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, **obj}
        try:
            self.stored = self.custom.create_cluster_custom_object(
                GROUP, VERSION, PLURALS[kind], body, dry_run="All"
            )
        except ApiException as exc:
            # 422 Invalid is the schema's refusal; anything else is not a verdict.
            assert exc.status == 422, (exc.status, exc.body)
            return str(exc.body)
        return None


@pytest.fixture(scope="module")
def server(envtest_server: EnvtestServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
    Server
]:
    kubeconfig = envtest_server.kubeconfig(tmp_path_factory.mktemp("crd") / "kubeconfig")
    api_client = kube_client(kubeconfig)
    try:
        yield Server(api_client)
    finally:
        api_client.close()


def targets_no_node(kind: str, obj: dict[str, Any]) -> bool:
    """NodeTwins and TelemetryProfiles are matched to their node (``spec.nodeName``;
    ``spec.target`` of scope ``node``) before they are parsed: one that names no node is
    parsed for none, which is no disagreement. Joulie's NodeTwin schema (the chart's
    follows it) requires neither ``spec`` nor ``nodeName``: the server holds such a twin,
    the agent ignores it."""
    spec = obj.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    if kind == NT:
        node = spec.get("nodeName")
    elif kind == TP:
        target = spec.get("target")
        target = target if isinstance(target, dict) else {}
        node = target.get("nodeName") if target.get("scope") == "node" else None
    else:
        return False
    return not (isinstance(node, str) and node)


def check_agreement(server: Server, kind: str, obj: dict[str, Any]) -> None:
    obj["metadata"] = {"name": "property"}  # the server's naming rules are not the CRD's
    refused = server.refusal(kind, copy.deepcopy(obj))
    if targets_no_node(kind, obj):
        return
    error = parse(kind, obj)
    if refused is not None:
        assert error is not None, f"parser accepts what the schema refuses: {refused}"
        return
    # What the agent is given is the object as stored (unknown fields pruned): the same.
    stored_error = parse(kind, server.stored)
    assert (stored_error is None) == (error is None), (error, stored_error)
    if error is not None:
        assert any(rule(error, obj) for rule in AGENT_SIDE.values()), (
            f"schema accepts what the parser refuses, for no listed agent-side check: {error}"
        )


PARSED_POWER = [p for p in POWER_PATHS if p not in INFORMATIONAL]
PARSED_TELEMETRY = [p for p in TELEMETRY_PATHS if not p.startswith(("metadata", "spec.target"))]


@pytest.mark.parametrize("kind", [NPP, NT])
@settings(max_examples=examples(60))
@given(case=bent(power_profiles(), PARSED_POWER, values))
def test_power_profile_schema_and_parser_agree(
    server: Server, kind: str, case: tuple[dict[str, Any], list[str]]
) -> None:
    check_agreement(server, kind, case[0])


@settings(max_examples=examples(80))
@given(case=bent(telemetry_profiles(), PARSED_TELEMETRY, values))
def test_telemetry_profile_schema_and_parser_agree(
    server: Server, case: tuple[dict[str, Any], list[str]]
) -> None:
    check_agreement(server, TP, case[0])


def test_the_oracle_sees_both_verdicts(server: Server) -> None:
    """The oracle can fail: the server refuses a cap under 1 W and accepts one of 1 W."""
    cpu = {"packagePowerCapWatts": 1.0}
    base: dict[str, Any] = {
        "metadata": {"name": "oracle"}, "spec": {"nodeName": "n", "profile": "eco", "cpu": cpu}
    }
    assert server.refusal(NPP, copy.deepcopy(base)) is None
    base["spec"]["cpu"]["packagePowerCapWatts"] = math.nextafter(1.0, 0.0)
    assert server.refusal(NPP, base) is not None
