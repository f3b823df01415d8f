"""The fast multiprocess collector agrees with prometheus_client's stock one.

Files are written by real worker-like processes (prometheus_client in
multiprocess mode with our per-node file ids), then both collectors read the
same directory.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from agentpool.supervisor.collector import FastMultiProcessCollector

WRITER = textwrap.dedent(
    """
    import sys
    from prometheus_client import values
    node, errors, policy = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    values.ValueClass = values.MultiProcessValue(process_identifier=lambda: "n-" + node)
    from agentpool.metrics import NodeMetrics
    from agentpool.model import Backend
    m = NodeMetrics(node)
    m.set_backend(Backend.DVFS)
    m.set_cap("eco", 120.0)
    if policy != "eco":
        m.set_cap(policy, 200.0)  # the eco series becomes a tombstone
    m.set_dvfs(130.5, 128.25, 20, 1, 0)
    m.count_action("throttle_up")
    for _ in range(errors):
        m.count_error()
    for seconds in (0.002, 0.03, 0.4):
        m.reconcile_seconds.observe(seconds)
    """
)


def write(directory: Path, node: str, errors: int, policy: str = "eco") -> None:
    env = {"PROMETHEUS_MULTIPROC_DIR": str(directory), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", WRITER, node, str(errors), policy], env=env, check=True)


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def registry_with(collector: object) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    return registry


def test_same_samples_as_the_stock_collector(tmp_path: Path) -> None:
    write(tmp_path, "node-a", errors=2)
    write(tmp_path, "node-b", errors=0)
    fast = samples(registry_with(FastMultiProcessCollector(str(tmp_path))))
    stock = samples(registry_with(MultiProcessCollector(None, path=str(tmp_path))))
    assert fast == stock
    assert fast[("joulie_reconcile_errors_total", (("node", "node-a"),))] == 2.0
    assert fast[("joulie_dvfs_throttle_pct", (("node", "node-b"),))] == 20.0
    # Histograms merge across workers: 2 workers x 3 observations.
    assert fast[("agentpool_reconcile_duration_seconds_count", ())] == 6.0
    assert fast[("agentpool_reconcile_duration_seconds_bucket", (("le", "0.005"),))] == 2.0


def test_cached_keys_follow_appends_and_value_changes(tmp_path: Path) -> None:
    collector = FastMultiProcessCollector(str(tmp_path))
    registry = registry_with(collector)
    write(tmp_path, "node-a", errors=1)
    assert samples(registry)[("joulie_reconcile_errors_total", (("node", "node-a"),))] == 1.0
    # Same file id again (a restarted worker): values change in place, new series append.
    write(tmp_path, "node-a", errors=3)
    write(tmp_path, "node-c", errors=0)
    after = samples(registry)
    assert after[("joulie_reconcile_errors_total", (("node", "node-a"),))] == 4.0
    assert ("joulie_backend_mode", (("mode", "dvfs"), ("node", "node-c"))) in after


def test_nan_gauges_are_tombstones(tmp_path: Path) -> None:
    write(tmp_path, "node-a", errors=0, policy="performance")
    fast = samples(registry_with(FastMultiProcessCollector(str(tmp_path))))
    caps = {k: v for k, v in fast.items() if k[0] == "joulie_policy_cap_watts"}
    assert caps == {
        ("joulie_policy_cap_watts", (("node", "node-a"), ("policy", "performance"))): 200.0
    }
    stock = samples(registry_with(MultiProcessCollector(None, path=str(tmp_path))))
    stale = ("joulie_policy_cap_watts", (("node", "node-a"), ("policy", "eco")))
    assert math.isnan(stock[stale]), "the stock collector would export the stale series as NaN"


def test_removed_files_disappear_from_the_next_scrape(tmp_path: Path) -> None:
    collector = FastMultiProcessCollector(str(tmp_path))
    registry = registry_with(collector)
    write(tmp_path, "node-a", errors=0)
    write(tmp_path, "node-b", errors=0)
    assert any(k[1] == (("node", "node-b"),) for k in samples(registry))
    for path in tmp_path.glob("*_n-node-b.db"):
        path.unlink()
    assert not any(("node", "node-b") in k[1] for k in samples(registry))
