"""The status rows, from raw objects with a fixed clock: owners, liveness, caps, problems."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agentpool.kube.status import HEARTBEAT_S
from agentpool.kubectl import command
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
    (row,) = rows(["n"], [bad], shards=3)
    assert row.cpu_cap == "invalid"
    assert "spec.cpu.packagePowerCapWatts" in row.problems[0]
    assert row.owner.startswith("shard ")


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
