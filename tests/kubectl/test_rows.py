"""The status rows, from raw objects with a fixed clock: owners, liveness, caps, problems."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentpool.kube.status import HEARTBEAT_S
from agentpool.kubectl import command
from agentpool.kubectl.pools import given, static_pools
from agentpool.kubectl.render import table
from agentpool.kubectl.rows import NodeRow, Options, build_rows, short_duration
from agentpool.pool.membership import ANNOTATION_CLAIMS, encode_claims
from agentpool.sim.apiserver import ApiEmulator
from agentpool.sim.objects import power_profile

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}}


def lease(pod: str, claims: set[str], renewed_ago: float = 1.0, holder: str | None = "x"
          ) -> dict[str, Any]:
    renewed = (NOW - timedelta(seconds=renewed_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"metadata": {"name": pod, "annotations": {ANNOTATION_CLAIMS: encode_claims(claims)}},
            "spec": {"holderIdentity": holder and pod, "leaseDurationSeconds": 15,
                     "renewTime": renewed}}


def rows(nodes: list[str], npps: list[dict[str, Any]] = (), tps: list[dict[str, Any]] = (),
         twins: list[dict[str, Any]] = (), leases: list[dict[str, Any]] = (),
         **options: Any) -> list[NodeRow]:
    return build_rows([node(n) for n in nodes], npps, tps, twins, leases,
                      Options(NOW, **options))


def test_two_live_pods_claiming_one_node_are_both_shown() -> None:
    (row,) = rows(["n"], leases=[lease("p-0", {"n"}), lease("p-1", {"n"})])
    assert (row.owner, row.owner_live) == ("p-0,p-1", True)


def test_a_released_lease_claims_nothing() -> None:
    (row,) = rows(["n"], leases=[lease("p-0", {"n"}, holder=None), lease("p-1", set())])
    assert (row.owner, row.owner_live) == (None, False)
    assert row.problems == ("no live owner: no live pool pod claims it",)


def test_without_leases_or_shards_the_owner_is_unknown_and_liveness_from_the_status() -> None:
    tp = {"metadata": {"name": "n"}, "spec": {"target": {"scope": "node", "nodeName": "n"}},
          "status": {"control": {"cpu": {"result": "applied", "backend": "rapl",
                                         "updatedAt": "2026-03-01T11:50:00Z"}}}}
    (row,) = rows(["n"], [power_profile("n", 100, "eco")], [tp])
    assert (row.owner, row.owner_live, row.age_s) == (None, True, 600.0)
    (stale,) = rows(["n"], [power_profile("n", 100, "eco")], [tp], stale_s=300)
    assert stale.owner_live is False
    assert stale.problems[0].startswith("no live owner: its status was last written 10m ago")
    # A cluster-scoped TelemetryProfile is not the node's.
    cluster_tp = {**tp, "spec": {"target": {"scope": "cluster"}}}
    (none,) = rows(["n"], [power_profile("n", 100, "eco")], [cluster_tp])
    assert (none.result, none.owner_live) == (None, None)


def test_the_nodetwin_wins_and_the_oldest_of_several_is_used() -> None:
    twins = [
        {"metadata": {"name": "b", "creationTimestamp": "2026-01-02T00:00:00Z"},
         "spec": {"nodeName": "n", "profile": "eco", "cpu": {"packagePowerCapWatts": 90}}},
        {"metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"},
         "spec": {"nodeName": "n", "profile": "eco", "cpu": {"packagePowerCapPctOfMax": 55}}},
    ]
    (row,) = rows(["n"], [power_profile("n", 100, "eco")], twins=twins)
    assert (row.api.value, row.cpu_cap) == ("nodetwin", "55%")
    (alone,) = rows(["n"])
    assert (alone.api.value, alone.cpu_cap) == ("none", None)


def test_an_invalid_desired_state_and_an_error_are_problems() -> None:
    bad = power_profile("n", 100, "eco")
    bad["spec"]["cpu"]["packagePowerCapWatts"] = -5
    (row,) = rows(["n"], [bad], pools=given(3))
    assert row.cpu_cap == "invalid"
    assert "spec.cpu.packagePowerCapWatts" in row.problems[0]
    assert row.owner.startswith("shard ")


def test_a_static_pools_shard_is_its_own_count_over_the_nodes_it_selects() -> None:
    pools = static_pools([
        {"metadata": {"name": "gpu-pool", "namespace": "j"}, "spec": {"replicas": 3, "template": {
            "spec": {"containers": [{"name": "agent", "env": [
                {"name": "AGENT_MODE", "value": "pool"}, {"name": "POOL_SHARDS", "value": "3"},
                {"name": "POOL_NODE_SELECTOR", "value": "kind=gpu"}]}]}}}},
    ])
    nodes = [{"metadata": {"name": name, "labels": {"kind": kind}}}
             for name, kind in (("g-1", "gpu"), ("g-2", "gpu"), ("c-1", "cpu"))]
    got = build_rows(nodes, [], [], [], [], Options(NOW, pools))
    # fnv32a % 3 of each name, worked out by hand from the FNV-1a definition.
    assert [(row.node, row.owner) for row in got] == [
        ("c-1", None), ("g-1", f"shard {fnv_mod('g-1', 3)}"), ("g-2", f"shard {fnv_mod('g-2', 3)}")]


def fnv_mod(name: str, shards: int) -> int:
    """32-bit FNV-1a (offset basis 2166136261, prime 16777619) modulo ``shards``: the
    contract's sharding, computed here on its own."""
    value = 2166136261
    for byte in name.encode():
        value = ((value ^ byte) * 16777619) % 2**32
    return value % shards


def cell(text: str, column: str) -> str:
    """The first row's cell under ``column`` (columns start where their header starts)."""
    header, first = text.splitlines()[:2]
    start = header.index(column)
    following = [header.index(c) for c in header[start:].split()[1:2]]
    return first[start:following[0] if following else None].strip()


def twin(status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "n"}, "spec": {"nodeName": "n", "profile": "eco",
            "cpu": {"packagePowerCapWatts": 90}}, "status": status}


@pytest.mark.parametrize(
    ("measurement", "power", "shown"),
    [
        ({"source": "prometheus", "measuredNodePowerW": 412.3}, 412.3, "412 W (node)"),
        ({"source": "http", "measuredNodePowerW": 250}, 250.0, "250 W (node)"),
        ({"source": "static", "measuredNodePowerW": 300}, None, "-"),  # an estimate
        ({"source": "utilization", "measuredNodePowerW": 300}, None, "-"),
        ({"source": "http-error", "measuredNodePowerW": 0}, None, "-"),  # measured nothing
        ({"measuredNodePowerW": "lots"}, None, "-"),
    ],
)
def test_a_nodetwin_nodes_power_is_what_joulies_operator_measured_of_the_node(
    measurement: dict[str, Any], power: float | None, shown: str
) -> None:
    (row,) = rows(["n"], twins=[twin({"powerMeasurement": measurement})])
    assert row.power_w == power
    assert (row.power_from is None) == (power is None)
    assert cell(table([row]), "POWER") == shown


def test_the_agents_own_observation_is_the_power_of_the_cpu_packages() -> None:
    tp = {"metadata": {"name": "n"}, "spec": {"target": {"scope": "node", "nodeName": "n"}},
          "status": {"control": {"cpu": {"observed": {"observedPowerWatts": 96.4}}}}}
    (row,) = rows(["n"], [power_profile("n", 100, "eco")], [tp])
    assert (row.power_w, row.power_from) == (96.4, "observed.observedPowerWatts")
    assert cell(table([row]), "POWER") == "96 W"


def test_short_durations_read_like_kubectls() -> None:
    assert [short_duration(s) for s in (0, 59, 119, 120, 7199, 7200, 172799, 172800)] == [
        "0s", "59s", "119s", "2m", "119m", "2h", "47h", "2d"]


def test_the_stale_default_is_two_status_heartbeats_and_a_minute() -> None:
    assert HEARTBEAT_S == command.HEARTBEAT_S
    assert f"{int(2 * HEARTBEAT_S + 60) // 60}m" == command.STALE_DEFAULT


def test_the_table_pads_columns_like_kubectl() -> None:
    text = table(rows(["a-long-node-name", "b"], leases=[lease("p-0", {"b"})]))
    lines = text.splitlines()
    assert lines[0].startswith("NODE               OWNER   API")
    assert lines[1].split() == ["a-long-node-name", "none", "none", "-", "-", "-", "-", "-",
                                "-"]
    assert lines[2].split()[:2] == ["b", "p-0"]


def test_watch_refreshes_until_ctrl_c(tmp_path: Path) -> None:
    with ApiEmulator() as emu:
        kubeconfig = emu.write_kubeconfig(tmp_path / "kubeconfig")
        emu.create("nodes", {"metadata": {"name": "w-0", "labels": {"joulie.io/managed": "true"}}})
        with subprocess.Popen(
            [sys.executable, "-m", "agentpool", "status", "--kubeconfig", str(kubeconfig),
             "-w", "--interval", "0.2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        ) as proc:
            assert proc.stdout is not None
            headers = 0
            while headers < 3:
                line = proc.stdout.readline()
                assert line, proc.stderr.read() if proc.stderr else ""
                headers += line.startswith("NODE")
            proc.send_signal(signal.SIGINT)
            # The last refresh found nothing wrong (no status: liveness unknown).
            assert proc.wait(30) == 0
