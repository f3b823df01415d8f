"""The chart's CRDs on a real kube-apiserver: what their schemas refuse there."""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.sim.apiserver.errors import ApiError
from agentpool.sim.envtest import EnvtestServer


def telemetry_profile(name: str, target: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "joulie.io/v1alpha1",
        "kind": "TelemetryProfile",
        "metadata": {"name": name},
        "spec": {"target": target},
    }


@pytest.mark.parametrize(
    ("target", "admitted"),
    [
        ({"scope": "node", "nodeName": "worker-0"}, True),
        ({"scope": "cluster"}, True),
        ({"scope": "node"}, False),
    ],
)
def test_a_node_scoped_telemetryprofile_needs_its_node(
    envtest_server: EnvtestServer, target: dict[str, Any], admitted: bool
) -> None:
    # The rule holds on 1.20, which has no CEL: the schema says it in plain OpenAPI.
    admin = envtest_server.api()
    obj = telemetry_profile("tp-target", target)
    try:
        if admitted:
            admin.create("telemetryprofiles", obj)
        else:
            with pytest.raises(ApiError) as refused:
                admin.create("telemetryprofiles", obj)
            assert refused.value.code == 422
            assert "anyOf" in str(refused.value)
    finally:
        try:
            admin.delete("telemetryprofiles", "tp-target")
        except ApiError as exc:
            if exc.code != 404:
                raise
