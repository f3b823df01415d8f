"""Fault 4 of issue 43: the disk under the metrics files and the journal fills up.

The real agent runs with ``PROMETHEUS_MULTIPROC_DIR`` and ``STATE_DIR`` each on a small
tmpfs of its own (:mod:`tests.faults.tmpfs`), over host-controlled nodes whose sysfs
trees live elsewhere. Both fill up while it runs. What users expect: the node already
capped keeps being enforced, and its series already in the files keep updating; a
node that arrives meanwhile is not capped, since its original host values cannot be
journaled (its status says so, and its host is left untouched rather than changed
without a record); nothing crash-loops (a worker writing its first series to a full
tmpfs through prometheus_client's mmap dies of SIGBUS); the agent says so once in its
log and in a metric of its own; space freed, everything catches up without a restart.
"""

from __future__ import annotations

import pytest

from agentpool.sim.cluster import SimCluster
from agentpool.sim.polling import wait_until
from agentpool.sim.sysfs.trees import build_nodes, intel_2socket, read_int
from tests.faults.tmpfs import can_mount_tmpfs, fill, seen_by, with_tmpfs
from tests.support.agents import all_read, live_worker_pid, pl1_files, restarts, series, worker_pids

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not can_mount_tmpfs(), reason="needs root and unshare -m to mount tmpfs"),
]

METRICS_FS = 4 << 20
STATE_FS = 256 << 10


def _node_series(text: str, node: str) -> set[str]:
    return {name for name, labels in series(text) if ("node", node) in labels
            and name.startswith("joulie_")}


def _dir_full(text: str, variable: str) -> float | None:
    return series(text).get(("agentpool_dir_full", (("dir", variable),)))


def test_a_full_disk_holds_new_series_and_new_caps_back_until_space_is_freed() -> None:
    with SimCluster() as cluster:
        template = str(cluster.workdir / "sys" / "{node}")
        trees = build_nodes(template, ["old", "new"], intel_2socket)
        originals = {p: read_int(p) for p in pl1_files(trees)}
        old_files, new_files = pl1_files({"old": trees["old"]}), pl1_files({"new": trees["new"]})
        metrics_dir, state_dir = cluster.workdir / "metrics", cluster.workdir / "state"
        cluster.add_node("old", cap=50, http=False)
        agent = cluster.start_agent(
            {"SYSFS_ROOT": template, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
             "STATE_DIR": str(state_dir)},
            wrap=with_tmpfs({metrics_dir: METRICS_FS, state_dir: STATE_FS}),
        )
        agent.wait_ready()
        wait_until(lambda: all_read(old_files, 50_000_000), 20)
        wait_until(lambda: "joulie_backend_mode" in _node_series(agent.metrics(), "old"), 10)

        fills = [fill(seen_by(agent.pid, d)) for d in (metrics_dir, state_dir)]
        for variable in ("PROMETHEUS_MULTIPROC_DIR", "STATE_DIR"):
            wait_until(lambda v=variable: _dir_full(agent.metrics(), v) == 1.0, 15)
        # The capped node goes on being enforced, and its series on being written.
        cluster.set_cap("old", 40)
        wait_until(lambda: all_read(old_files, 40_000_000), 20)
        # The policy label is the NodePowerProfile's name, as Joulie's agent sets it.
        cap = ("joulie_policy_cap_watts", (("node", "old"), ("policy", "old")))
        wait_until(lambda: series(agent.metrics()).get(cap) == 40.0, 10)
        # A node that arrives now: no journal, so no cap; no files, so no series.
        cluster.add_node("new", cap=50, http=False)
        wait_until(lambda: cluster.status("new").get("result") == "error", 20)
        message = cluster.status("new")["message"]
        assert "STATE_DIR" in message, message
        assert "No space left on device" in message, message
        assert "nothing written to the host" in message, message
        pid = live_worker_pid(agent, "new")
        assert {p: read_int(p) for p in new_files} == {p: originals[p] for p in new_files}
        assert _node_series(agent.metrics(), "new") == set()
        assert worker_pids(agent)["new"] == pid
        assert restarts(agent, "new") == restarts(agent, "old") == 0.0
        logs = agent.logs()
        assert f"PROMETHEUS_MULTIPROC_DIR {metrics_dir} is full" in logs, logs
        assert f"STATE_DIR {state_dir} is full" in logs, logs

        for path in fills:
            path.unlink()
        wait_until(lambda: all_read(new_files, 50_000_000), 20)
        wait_until(lambda: cluster.status("new").get("result") == "applied", 10)
        wait_until(lambda: "joulie_backend_mode" in _node_series(agent.metrics(), "new"), 10)
        for variable in ("PROMETHEUS_MULTIPROC_DIR", "STATE_DIR"):
            wait_until(lambda v=variable: _dir_full(agent.metrics(), v) == 0.0, 15)
        # The same process all along: it ticked on the full disks without dying.
        assert worker_pids(agent)["new"] == pid
        assert restarts(agent, "new") == restarts(agent, "old") == 0.0
        assert agent.terminate() == 0
        assert {p: read_int(p) for p in originals} == originals
        for tree in trees.values():
            tree.close()
