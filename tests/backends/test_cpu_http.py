"""The CPU side of the HTTP protocol against real servers on 127.0.0.1 (backends/cpu_http.py).

Two servers (tests/backends/conftest.py): the project's PowerSim (what the
Joulie simulator speaks, with its fault injection), and a tiny scripted
``http.server`` for answers PowerSim never gives (only one payload shape,
empty bodies, odd status codes).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import pytest

from agentpool.backends.cpu_http import DVFS_ACTION, RAPL_ACTION, post_control, read_package_power
from agentpool.backends.httpclient import ControlAnswer
from agentpool.errors import HttpBackendError
from agentpool.resources.routing import HttpEndpoint
from agentpool.results import Result
from agentpool.sim.power.model import RequestKind
from agentpool.sim.power.server import PowerSim
from tests.backends.scripted import OK_S, Scripted, answer


def test_telemetry_from_power_sim(sim: PowerSim) -> None:
    endpoint = HttpEndpoint(sim.telemetry_endpoint, OK_S)
    assert read_package_power(endpoint, "worker-1") == 160.0
    sim.set_load("worker-1", 1.0)
    assert read_package_power(endpoint, "worker-1") == 260.0
    # {node} was replaced by the node name.
    assert [r.path for r in sim.requests("worker-1", RequestKind.TELEMETRY)] == [
        "/telemetry/worker-1",
        "/telemetry/worker-1",
    ]


@pytest.mark.parametrize(
    ("payload", "watts"),
    [
        ({"packagePowerWatts": 142.5}, 142.5),
        ({"packagePowerWatts": 142}, 142.0),
        ({"cpu": {"packagePowerWatts": 97.25}}, 97.25),
        ({"node": "n", "cpu": {"packagePowerWatts": 0}}, 0.0),
        # The CPU's own reading wins when both are present: on a GPU node the top level
        # is CPU + GPU (docs/resources.md, "GPU power caps").
        ({"packagePowerWatts": 30, "cpu": {"packagePowerWatts": 20}}, 20.0),
        ({"packagePowerWatts": 30, "cpu": {"load": 0.5}}, 30.0),
        # JSON without the field: no reading.
        ({"node": "n"}, None),
        ({"cpu": {"load": 0.5}}, None),
        ({"packagePowerWatts": None}, None),
        ({"cpu": "busy"}, None),
    ],
)
def test_telemetry_payload_shapes(
    scripted: tuple[Scripted, str], payload: dict[str, Any], watts: float | None
) -> None:
    script, url = scripted
    answer(script, payload)
    assert read_package_power(HttpEndpoint(url + "/telemetry/{node}", OK_S), "node-a") == watts
    method, path, headers, _ = script.requests[-1]
    assert (method, path) == ("GET", "/telemetry/node-a")
    assert headers["Accept"] == "application/json"


@pytest.mark.parametrize(
    ("status", "body", "problem"),
    [
        (404, b'{"error": "no such node"}', "HTTP 404"),
        (500, b"", "HTTP 500"),
        (503, b'{"packagePowerWatts": 100}', "HTTP 503"),  # non-2xx is an error whatever it says
        (200, b"{not json", "not JSON"),
        (200, b"<html>502 Bad Gateway</html>", "not JSON"),
        (200, b"", "not JSON"),
        (200, b"[1, 2]", "not a JSON object"),
        (200, b'{"packagePowerWatts": "120W"}', "not a number"),
        (200, b'{"packagePowerWatts": true}', "not a number"),
        # Python's json accepts these non-JSON literals; a NaN would poison the EMA for good.
        (200, b'{"packagePowerWatts": NaN}', "not a number"),
        (200, b'{"cpu": {"packagePowerWatts": Infinity}}', "not a number"),
        (200, b'{"packagePowerWatts": -Infinity}', "not a number"),
    ],
)
def test_telemetry_errors(
    scripted: tuple[Scripted, str], status: int, body: bytes, problem: str
) -> None:
    script, url = scripted
    answer(script, body, status)
    with pytest.raises(HttpBackendError, match=problem) as caught:
        read_package_power(HttpEndpoint(url + "/t", OK_S), "n")
    assert caught.value.url == url + "/t"
    assert caught.value.status == (status if status >= 300 else None)


@pytest.mark.parametrize(
    ("fault", "problem"),
    [("5xx", "HTTP 503"), ("garbage", "not JSON"), ("html", "not JSON"), ("huge", "larger than")],
)
def test_telemetry_faults_from_power_sim(sim: PowerSim, fault: str, problem: str) -> None:
    sim.set_fault("worker-1", fault)
    with pytest.raises(HttpBackendError, match=problem):
        read_package_power(HttpEndpoint(sim.telemetry_endpoint, OK_S), "worker-1")


def test_telemetry_timeout_on_a_hanging_endpoint(sim: PowerSim) -> None:
    sim.set_fault("worker-1", "hang")
    started = time.monotonic()
    with pytest.raises(HttpBackendError, match=r"timed out after 0\.3s"):
        read_package_power(HttpEndpoint(sim.telemetry_endpoint, 0.3), "worker-1")
    # The hang has no end of its own: only the client's timeout can have ended the wait.
    assert time.monotonic() - started < 10.0
    sim.set_fault("worker-1", None)
    assert read_package_power(HttpEndpoint(sim.telemetry_endpoint, 5.0), "worker-1") == 160.0


def test_unreachable_endpoint() -> None:
    # Port 9 on loopback: nothing listens there, the connection is refused at once.
    with pytest.raises(HttpBackendError, match="unreachable"):
        read_package_power(HttpEndpoint("http://127.0.0.1:9/t", 1.0), "n")


# -- control ----------------------------------------------------------------------------------


def _parse_ts(ts: str) -> dt.datetime:
    assert ts.endswith("Z"), ts
    parsed = dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    assert parsed.utcoffset() == dt.timedelta(0)
    return parsed


def test_control_body_fields(sim: PowerSim) -> None:
    endpoint = HttpEndpoint(sim.control_endpoint, OK_S)
    before = dt.datetime.now(dt.UTC)
    got = post_control(endpoint, "worker-1", RAPL_ACTION, 120.0, -1)
    after = dt.datetime.now(dt.UTC)
    assert got.result is Result.APPLIED
    assert got.message == "RAPL cap set to 120 W"
    assert got.state["capWatts"] == 120.0
    (request,) = sim.requests("worker-1", RequestKind.CONTROL)
    assert request.path == "/control/worker-1"
    body = request.body
    assert set(body) == {"node", "action", "capWatts", "throttlePct", "ts"}
    assert body["node"] == "worker-1"
    assert body["action"] == "rapl.set_power_cap_watts"
    assert body["capWatts"] == 120.0
    assert body["throttlePct"] == -1  # RAPL carries no throttle
    assert before - dt.timedelta(seconds=1) <= _parse_ts(body["ts"]) <= after
    assert sim.state("worker-1").cap_watts == 120.0

    got = post_control(endpoint, "worker-1", DVFS_ACTION, 120.0, 30)
    assert got.result is Result.APPLIED
    body = sim.requests("worker-1", RequestKind.CONTROL)[-1].body
    assert (body["action"], body["throttlePct"]) == ("dvfs.set_throttle_pct", 30)
    assert sim.state("worker-1").throttle_pct == 30.0


def test_control_content_type_and_method(scripted: tuple[Scripted, str]) -> None:
    script, url = scripted
    answer(script, b"")
    post_control(HttpEndpoint(url + "/c/{node}", OK_S), "n1", DVFS_ACTION, 90.0, 10)
    method, path, headers, raw = script.requests[-1]
    assert (method, path) == ("POST", "/c/n1")
    assert headers["Content-Type"] == "application/json"
    assert json.loads(raw)["throttlePct"] == 10


@pytest.mark.parametrize("result", ["blocked", "error"])
def test_control_blocked_or_error_answer_is_honoured(sim: PowerSim, result: str) -> None:
    sim.set_behaviour("worker-1", result, "RAPL locked by BIOS", action=RAPL_ACTION)
    got = post_control(HttpEndpoint(sim.control_endpoint, OK_S), "worker-1", RAPL_ACTION, 120.0, -1)
    assert got == ControlAnswer(Result(result), "RAPL locked by BIOS", got.state)
    assert got.state["capWatts"] is None  # the simulator did not apply it
    # DVFS on the same node still applies.
    dvfs = post_control(
        HttpEndpoint(sim.control_endpoint, OK_S), "worker-1", DVFS_ACTION, 120.0, 20
    )
    assert dvfs.result is Result.APPLIED


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", ControlAnswer(Result.APPLIED, "rapl.set_power_cap_watts accepted")),
        (b"  \n", ControlAnswer(Result.APPLIED, "rapl.set_power_cap_watts accepted")),
        (b"{}", ControlAnswer(Result.APPLIED, "rapl.set_power_cap_watts applied")),
        (b"[]", ControlAnswer(Result.APPLIED, "rapl.set_power_cap_watts accepted")),
        (
            b'{"result": "blocked"}',
            ControlAnswer(Result.BLOCKED, "rapl.set_power_cap_watts blocked"),
        ),
        (
            b'{"result": "applied", "message": "ok", "state": {"capWatts": 120}}',
            ControlAnswer(Result.APPLIED, "ok", {"capWatts": 120}),
        ),
        (
            b'{"result": "error", "message": "busy", "state": 5}',
            ControlAnswer(Result.ERROR, "busy"),
        ),
    ],
)
def test_control_2xx_answers(
    scripted: tuple[Scripted, str], body: bytes, expected: ControlAnswer
) -> None:
    script, url = scripted
    answer(script, body, 200)
    assert post_control(HttpEndpoint(url, OK_S), "n", RAPL_ACTION, 120.0, -1) == expected


@pytest.mark.parametrize("status", [201, 202, 204])
def test_control_other_2xx_with_empty_body_is_applied(
    scripted: tuple[Scripted, str], status: int
) -> None:
    script, url = scripted
    answer(script, b"", status)
    assert post_control(HttpEndpoint(url, OK_S), "n", RAPL_ACTION, 1.0, -1).result is Result.APPLIED


@pytest.mark.parametrize(
    ("status", "body", "problem"),
    [
        (400, b'{"result": "applied"}', "HTTP 400"),
        (409, b"", "HTTP 409"),
        (502, b"<html/>", "HTTP 502"),
        (200, b"{garbage", "not JSON"),
        (200, b'{"result": "maybe"}', "unknown result 'maybe'"),
    ],
)
def test_control_errors(
    scripted: tuple[Scripted, str], status: int, body: bytes, problem: str
) -> None:
    script, url = scripted
    answer(script, body, status)
    with pytest.raises(HttpBackendError, match=problem):
        post_control(HttpEndpoint(url, OK_S), "n", RAPL_ACTION, 120.0, -1)


def test_control_timeout_on_a_hanging_endpoint(sim: PowerSim) -> None:
    sim.set_fault("worker-1", "hang", endpoint="control")
    with pytest.raises(HttpBackendError, match="timed out"):
        post_control(HttpEndpoint(sim.control_endpoint, 0.2), "worker-1", RAPL_ACTION, 1.0, -1)
    # The telemetry endpoint of the same node is not affected.
    assert read_package_power(HttpEndpoint(sim.telemetry_endpoint, 5.0), "worker-1") == 160.0


def test_control_5xx_from_power_sim(sim: PowerSim) -> None:
    sim.set_fault("worker-1", "5xx", status=502, count=1)
    with pytest.raises(HttpBackendError) as caught:
        post_control(HttpEndpoint(sim.control_endpoint, OK_S), "worker-1", RAPL_ACTION, 1.0, -1)
    assert caught.value.status == 502
    # count=1: the next request goes through.
    assert (
        post_control(
            HttpEndpoint(sim.control_endpoint, OK_S), "worker-1", RAPL_ACTION, 1.0, -1
        ).result
        is Result.APPLIED
    )


@pytest.mark.parametrize(
    "body",
    [
        b'{"packagePowerWatts": 1' + b"0" * 400 + b"}",  # math.isfinite raised OverflowError
        b'{"packagePowerWatts": -12}',  # no meter reads a negative power
        b'{"cpu": {"packagePowerWatts": -0.5}}',
    ],
)
def test_readings_that_are_no_power_are_errors(scripted: tuple[Scripted, str], body: bytes) -> None:
    script, url = scripted
    answer(script, body)
    with pytest.raises(HttpBackendError, match="not a number of watts"):
        read_package_power(HttpEndpoint(url + "/t", OK_S), "n")
