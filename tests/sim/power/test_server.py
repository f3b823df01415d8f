"""The power simulator, driven through real HTTP on 127.0.0.1 (protocol: backends/httpclient.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from agentpool.sim.power.model import NodeConfig, RequestKind
from agentpool.sim.power.server import PowerSim

QUIET = NodeConfig(idle_watts=60.0, max_watts=260.0, load=0.5, noise_watts=0.0)


@pytest.fixture
def sim() -> Iterator[PowerSim]:
    with PowerSim(defaults=QUIET, huge_bytes=256 * 1024) as s:
        yield s


def http(
    url: str, body: Any = None, *, raw: bytes | None = None, timeout: float = 5.0
) -> tuple[int, bytes, str]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read(), resp.headers.get_content_type()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read(), exc.headers.get_content_type()


def telemetry(sim: PowerSim, node: str) -> dict[str, Any]:
    status, body, _ = http(f"{sim.url}/telemetry/{node}")
    assert status == 200
    result: dict[str, Any] = json.loads(body)
    return result


def control(
    sim: PowerSim, node: str, action: str, cap: float = -1, throttle: float = -1
) -> tuple[int, dict[str, Any]]:
    payload = {"node": node, "action": action, "capWatts": cap, "throttlePct": throttle,
               "ts": "2026-02-27T00:00:00Z"}
    status, body, _ = http(f"{sim.url}/control/{node}", payload)
    return status, json.loads(body)


def rapl(sim: PowerSim, node: str, cap: float) -> tuple[int, dict[str, Any]]:
    return control(sim, node, "rapl.set_power_cap_watts", cap=cap)


def dvfs(sim: PowerSim, node: str, pct: float) -> tuple[int, dict[str, Any]]:
    return control(sim, node, "dvfs.set_throttle_pct", throttle=pct)


# -- telemetry and the power model ------------------------------------------


def test_telemetry_shape_and_first_contact_creates_the_node(sim: PowerSim) -> None:
    assert sim.nodes() == []
    doc = telemetry(sim, "worker-0")
    assert doc["node"] == "worker-0"
    assert doc["packagePowerWatts"] == pytest.approx(160.0)  # 60 + 0.5 * 200
    assert doc["cpu"]["packagePowerWatts"] == doc["packagePowerWatts"]
    assert doc["capWatts"] is None
    assert doc["throttlePct"] == 0
    ts = dt.datetime.fromisoformat(doc["ts"])
    assert ts.utcoffset() == dt.timedelta(0)
    assert sim.nodes() == ["worker-0"]
    assert sim.state("worker-0").telemetry_reads == 1


def test_rapl_cap_limits_power_and_answer_carries_state(sim: PowerSim) -> None:
    status, answer = rapl(sim, "n1", 120)
    assert status == 200
    assert answer["result"] == "applied"
    assert "120" in answer["message"]
    assert answer["state"]["capWatts"] == 120
    assert answer["state"]["packagePowerWatts"] == pytest.approx(120.0)
    assert telemetry(sim, "n1")["packagePowerWatts"] == pytest.approx(120.0)
    state = sim.state("n1")
    assert (state.cap_watts, state.applied_controls) == (120.0, 1)
    rapl(sim, "n1", 500)  # a cap above demand does not bind
    assert telemetry(sim, "n1")["packagePowerWatts"] == pytest.approx(160.0)


def test_throttle_shrinks_only_the_dynamic_part_then_the_cap_applies(sim: PowerSim) -> None:
    status, answer = dvfs(sim, "n1", 50)
    assert (status, answer["result"]) == (200, "applied")
    # dynamic 100 W * (1 - 0.5 * 0.7) = 65 W on top of 60 W idle
    assert telemetry(sim, "n1")["packagePowerWatts"] == pytest.approx(125.0)
    assert sim.state("n1").throttle_pct == 50
    dvfs(sim, "n1", 100)
    assert telemetry(sim, "n1")["packagePowerWatts"] == pytest.approx(90.0)
    rapl(sim, "n1", 80)
    assert telemetry(sim, "n1")["packagePowerWatts"] == pytest.approx(80.0)


def test_load_and_per_node_config(sim: PowerSim) -> None:
    sim.set_load("a", 1.0)
    sim.add_node("b", idle_watts=20, max_watts=100, load=0.25)
    assert telemetry(sim, "a")["packagePowerWatts"] == pytest.approx(260.0)
    assert telemetry(sim, "b")["packagePowerWatts"] == pytest.approx(40.0)
    sim.configure("b", max_watts=220)
    assert sim.state("b").expected_power_watts == pytest.approx(70.0)
    with pytest.raises(ValueError, match="already exists"):
        sim.add_node("b")
    with pytest.raises(ValueError, match="load"):
        sim.set_load("a", 1.5)
    assert sim.state("a").config.load == 1.0  # a refused change leaves the node alone


def test_noise_is_seeded_per_node_and_reproducible() -> None:
    noisy = NodeConfig(noise_watts=5.0)

    def readings(seed: int, order: list[str]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {n: [] for n in order}
        with PowerSim(seed=seed, defaults=noisy) as s:
            for _ in range(20):
                for n in order:
                    out[n].append(telemetry(s, n)["packagePowerWatts"])
        return out

    first = readings(7, ["x", "y"])
    again = readings(7, ["y", "x"])  # polling order does not change a node's sequence
    other = readings(8, ["x", "y"])
    assert first == again
    assert first["x"] != other["x"]
    assert first["x"] != first["y"]
    assert len(set(first["x"])) == 20
    mean = sum(first["x"]) / 20
    assert 150 < mean < 160 + 150 / 20 ** 0.5  # centred on 155 W with sigma 5
    assert all(abs(v - 155.0) < 5 * 5 for v in first["x"])


# -- control answers -----------------------------------------------------------


@pytest.mark.parametrize("result", ["blocked", "error"])
def test_behaviour_refuses_without_changing_state(sim: PowerSim, result: str) -> None:
    sim.set_behaviour("n1", result, message="RAPL locked by BIOS")
    status, answer = rapl(sim, "n1", 100)
    assert status == 200
    assert answer == {
        "result": result,
        "message": "RAPL locked by BIOS",
        "state": answer["state"],
    }
    assert answer["state"]["capWatts"] is None
    assert sim.state("n1").cap_watts is None
    assert sim.state("n1").applied_controls == 0
    sim.set_behaviour("n1", "applied")
    assert rapl(sim, "n1", 100)[1]["result"] == "applied"


def test_behaviour_per_action_blocks_rapl_but_applies_dvfs(sim: PowerSim) -> None:
    sim.set_behaviour("n1", "blocked", action="rapl.set_power_cap_watts")
    assert rapl(sim, "n1", 100)[1]["result"] == "blocked"
    assert dvfs(sim, "n1", 30)[1]["result"] == "applied"
    state = sim.state("n1")
    assert (state.cap_watts, state.throttle_pct) == (None, 30.0)
    sim.set_behaviour("n1", "applied")  # no action: resets every per-action answer
    assert rapl(sim, "n1", 100)[1]["result"] == "applied"


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b"not json", "JSON object"),
        (json.dumps({"node": "n1", "capWatts": 10}).encode(), "action"),
        (json.dumps({"node": "n1", "action": "rapl.set_power_cap_watts",
                     "capWatts": 0}).encode(), "capWatts"),
        (json.dumps({"node": "n1", "action": "rapl.set_power_cap_watts",
                     "capWatts": True}).encode(), "capWatts"),
        (json.dumps({"node": "n1", "action": "dvfs.set_throttle_pct",
                     "throttlePct": 150}).encode(), "throttlePct"),
        (json.dumps({"node": "other", "action": "dvfs.set_throttle_pct",
                     "throttlePct": 10}).encode(), "does not match"),
    ],
)
def test_malformed_control_is_400_and_changes_nothing(
    sim: PowerSim, payload: bytes, fragment: str
) -> None:
    status, body, _ = http(f"{sim.url}/control/n1", raw=payload)
    assert status == 400
    answer = json.loads(body)
    assert answer["result"] == "error"
    assert fragment in answer["message"]
    state = sim.state("n1")
    assert (state.cap_watts, state.throttle_pct, state.applied_controls) == (None, 0.0, 0)


def test_unknown_routes_are_404_and_recorded_as_other(sim: PowerSim) -> None:
    assert http(f"{sim.url}/healthz")[0] == 200
    assert http(f"{sim.url}/nope/n1")[0] == 404
    assert http(f"{sim.url}/telemetry/n1", {"x": 1})[0] == 404  # POST to telemetry
    others = sim.requests(kind=RequestKind.OTHER)
    assert [r.path for r in others] == ["/healthz", "/nope/n1", "/telemetry/n1"]
    assert all(r.node is None for r in others)
    assert sim.nodes() == []


# -- faults ----------------------------------------------------------------------


def test_fault_5xx_with_status_and_count(sim: PowerSim) -> None:
    sim.set_fault("n1", "5xx", status=502, count=2)
    assert http(f"{sim.url}/telemetry/n1")[0] == 502
    assert rapl(sim, "n1", 100)[0] == 502
    assert sim.state("n1").cap_watts is None  # a faulted control changes nothing
    assert http(f"{sim.url}/telemetry/n1")[0] == 200  # the count is spent
    assert [r.fault for r in sim.requests("n1")] == ["5xx", "5xx", None]


def test_fault_targets_one_endpoint_and_other_nodes_are_untouched(sim: PowerSim) -> None:
    sim.set_fault("n1", "5xx", endpoint="telemetry")
    assert http(f"{sim.url}/telemetry/n1")[0] == 503
    assert rapl(sim, "n1", 100)[0] == 200
    assert http(f"{sim.url}/telemetry/n2")[0] == 200
    sim.set_fault("n1", "5xx", endpoint="control")
    assert http(f"{sim.url}/telemetry/n1")[0] == 200
    assert rapl(sim, "n1", 90)[0] == 503
    sim.set_fault("n1", None)
    assert rapl(sim, "n1", 90)[0] == 200


def test_fault_garbage_and_html(sim: PowerSim) -> None:
    sim.set_fault("n1", "garbage")
    status, body, ctype = http(f"{sim.url}/telemetry/n1")
    assert (status, ctype) == (200, "application/json")
    with pytest.raises(ValueError, match=r"decode|Expecting"):
        json.loads(body)
    sim.set_fault("n1", "html")
    status, body, ctype = http(f"{sim.url}/telemetry/n1")
    assert (status, ctype) == (200, "text/html")
    assert body.startswith(b"<html>")
    status, body, ctype = http(
        f"{sim.url}/control/n1", {"node": "n1", "action": "dvfs.set_throttle_pct",
                                  "throttlePct": 40}
    )
    assert (status, ctype) == (200, "text/html")
    assert sim.state("n1").throttle_pct == 0  # a faulted control changes nothing


def test_fault_huge_streams_a_valid_oversized_document(sim: PowerSim) -> None:
    sim.set_fault("n1", "huge")
    status, body, _ = http(f"{sim.url}/telemetry/n1")
    assert status == 200
    assert len(body) == 256 * 1024
    assert json.loads(body)["packagePowerWatts"] == 100.0


def test_a_client_that_stops_reading_a_huge_answer_does_not_hurt_the_server() -> None:
    with PowerSim(defaults=QUIET, huge_bytes=32 * 1024 * 1024) as s:
        s.set_fault("n1", "huge")
        with urllib.request.urlopen(f"{s.url}/telemetry/n1", timeout=5) as resp:
            assert int(resp.headers["Content-Length"]) == 32 * 1024 * 1024
            assert len(resp.read(1024)) == 1024  # and hang up, like a read limit would
        assert telemetry(s, "n2")["packagePowerWatts"] == pytest.approx(160.0)


def _hung_get(url: str, results: list[int]) -> threading.Thread:
    def run() -> None:
        results.append(http(url, timeout=10)[0])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_hang_blocks_only_that_node_until_cleared(sim: PowerSim) -> None:
    sim.set_fault("stuck", "hang")
    results: list[int] = []
    thread = _hung_get(f"{sim.url}/telemetry/stuck", results)
    sim.wait_for(lambda: sim.requests("stuck"))
    started = time.monotonic()
    for i in range(20):
        assert telemetry(sim, f"ok-{i}")["packagePowerWatts"] == pytest.approx(160.0)
    assert time.monotonic() - started < 2.0
    assert results == []  # still hung
    sim.set_fault("stuck", None)
    thread.join(5)
    assert results == [504]
    assert telemetry(sim, "stuck")["packagePowerWatts"] == pytest.approx(160.0)


def test_hang_with_duration_ends_by_itself(sim: PowerSim) -> None:
    sim.set_fault("stuck", "hang", endpoint="control", hang_seconds=0.2)
    started = time.monotonic()
    assert rapl(sim, "stuck", 100)[0] == 504
    assert 0.2 <= time.monotonic() - started < 3.0
    assert sim.state("stuck").cap_watts is None


def test_stop_returns_promptly_with_hung_requests_open() -> None:
    s = PowerSim(defaults=QUIET).start()
    s.set_fault("stuck", "hang")
    results: list[int] = []
    threads = [_hung_get(f"{s.url}/telemetry/stuck", results) for _ in range(5)]
    s.wait_for(lambda: len(s.requests("stuck")) == 5)
    started = time.monotonic()
    s.stop()
    assert time.monotonic() - started < 2.0
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive()


# -- the request record -----------------------------------------------------------


def test_requests_are_recorded_with_bodies_and_both_clocks(sim: PowerSim) -> None:
    before_wall, before_mono = time.time(), time.monotonic()
    telemetry(sim, "a")
    rapl(sim, "a", 110)
    dvfs(sim, "b", 20)
    records = sim.requests()
    assert [(r.node, r.method, r.kind) for r in records] == [
        ("a", "GET", RequestKind.TELEMETRY),
        ("a", "POST", RequestKind.CONTROL),
        ("b", "POST", RequestKind.CONTROL),
    ]
    assert records[0].body is None
    assert records[1].body["action"] == "rapl.set_power_cap_watts"
    assert records[1].body["capWatts"] == 110
    assert records[2].body["throttlePct"] == 20
    assert [r.monotonic for r in records] == sorted(r.monotonic for r in records)
    assert all(r.monotonic >= before_mono and r.wall >= before_wall for r in records)
    assert all(r.wall <= time.time() for r in records)
    assert [r.node for r in sim.requests(node="a")] == ["a", "a"]
    assert len(sim.requests(kind="control")) == 2
    assert len(sim.requests(node="a", kind=RequestKind.CONTROL)) == 1
    sim.clear_requests()
    assert sim.requests() == []
    assert sim.request_count == 3


def test_record_is_bounded_but_the_count_is_not() -> None:
    with PowerSim(defaults=QUIET, max_requests=5) as s:
        for i in range(8):
            telemetry(s, f"n{i}")
        assert [r.node for r in s.requests()] == ["n3", "n4", "n5", "n6", "n7"]
        assert s.request_count == 8


def test_wait_for_returns_the_value_or_times_out() -> None:
    calls: list[int] = []

    def third_time() -> int:
        calls.append(1)
        return len(calls) if len(calls) >= 3 else 0

    assert PowerSim.wait_for(third_time, timeout=5) == 3
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        PowerSim.wait_for(lambda: False, timeout=0.1)
    assert time.monotonic() - started < 1.0


# -- scale and the command line -----------------------------------------------------


def test_a_thousand_nodes_at_once_while_one_hangs(sim: PowerSim) -> None:
    async def poll(nodes: range) -> list[float]:
        connector = aiohttp.TCPConnector(limit=100)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def one(i: int) -> float:
                async with session.get(f"{sim.url}/telemetry/node-{i}") as resp:
                    assert resp.status == 200
                    doc = await resp.json()
                    return float(doc["packagePowerWatts"])

            return await asyncio.gather(*(one(i) for i in nodes))

    sim.set_fault("node-0", "hang")
    hung: list[int] = []
    thread = _hung_get(f"{sim.url}/telemetry/node-0", hung)
    sim.wait_for(lambda: sim.requests("node-0"))
    started = time.monotonic()
    powers = asyncio.run(poll(range(1, 1000)))
    elapsed = time.monotonic() - started
    assert len(powers) == 999
    assert all(p == pytest.approx(160.0) for p in powers)
    assert len(sim.nodes()) == 1000
    assert elapsed < 5.0, f"999 requests took {elapsed:.1f} s"
    assert hung == []
    sim.set_fault("node-0", None)
    thread.join(5)
    assert hung == [504]


def test_module_runs_as_a_server_until_terminated() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentpool.sim.power.server", "--port", "0", "--noise-watts", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split()[3]
        assert url.startswith("http://127.0.0.1:")
        status, body, _ = http(f"{url}/telemetry/w0")
        assert status == 200
        assert json.loads(body)["packagePowerWatts"] == pytest.approx(155.0)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_the_request_record_is_served_over_http(sim: PowerSim) -> None:
    # How a test reads a simulator that runs in a pod (tests/e2e).
    rapl(sim, "n1", 120)
    telemetry(sim, "n2")
    status, body, content_type = http(f"{sim.url}/requests")
    assert (status, content_type) == (200, "application/json")
    served = json.loads(body)
    recorded = sim.requests()
    assert [(r["node"], r["kind"], r["path"]) for r in served] == [
        ("n1", "control", "/control/n1"), ("n2", "telemetry", "/telemetry/n2")
    ]
    assert served[0]["body"]["capWatts"] == 120
    assert [r["monotonic"] for r in served] == [r.monotonic for r in recorded]
    assert served[0]["userAgent"] == recorded[0].user_agent
    assert len(sim.requests()) == 2  # reading the record is not recorded
