"""The agent's multiprocess collector agrees with prometheus_client's stock one.

Files are written by real worker-like processes (prometheus_client in
multiprocess mode with the workers' per-node file ids), then the agent's
``render()`` (what ``/metrics`` serves) and the stock ``MultiProcessCollector``
read the same directory, and their text is compared line for line: names,
labels and their escaping, HELP and TYPE, and every value.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from agentpool.supervisor.collector import FastMultiProcessCollector
from agentpool.worker.nodefiles import METRICS_FILE_BYTES

WRITER = textwrap.dedent(
    """
    import sys
    from prometheus_client import values
    from agentpool.worker.nodefiles import metrics_id, presize_metrics_files
    node, errors, policy, extra = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    if sys.argv[5] == "presize":  # as a worker starts (agentpool.worker.main)
        import os
        presize_metrics_files(os.environ["PROMETHEUS_MULTIPROC_DIR"], node)
    values.ValueClass = values.MultiProcessValue(process_identifier=lambda: metrics_id(node))
    from agentpool.controller.metrics import NodeMetrics
    from agentpool.results import Backend
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
    if extra == "extra":
        from prometheus_client import Counter, Gauge, Histogram, Summary
        # Every gauge mode prometheus_client has, a summary, a labelled histogram, and
        # label values and help text that need escaping (the project uses livesum
        # gauges, counters and a histogram; the collector implements every mode).
        weight = 1.5 if node == "node-a" else 4.0
        for mode in ("all", "liveall", "min", "livemin", "max", "livemax", "sum",
                     "livesum", "mostrecent", "livemostrecent"):
            g = Gauge("mode_" + mode, "gauge in mode " + mode, ["k"], multiprocess_mode=mode)
            g.labels("v").set(weight)
        odd = Counter("odd_labels", 'help with \\\\ and \\n and "quotes"', ["v"])
        for value in ('say "hi"', "back\\\\slash", "two\\nlines", "Grüße ⚡", ""):
            odd.labels(value).inc(weight)
        s = Summary("request_size_bytes", "a summary", ["node"])
        s.labels("shared").observe(weight)
        h = Histogram("labelled_seconds", "histogram with labels", ["route"], buckets=(1, 2.5))
        h.labels('a"b').observe(weight)
        h.labels("plain").observe(0.5)
    if extra == "many":  # enough series that every file outgrows its first size
        from prometheus_client import Counter, Gauge, Histogram
        h = Histogram("joulie_bench_many_h", "many histogram series", ["node", "i"])
        c = Counter("joulie_bench_many", "many counter series", ["node", "i"])
        g = Gauge("joulie_bench_many_g", "many gauge series", ["node", "i"],
                  multiprocess_mode="livesum")
        for i in range(150):
            c.labels(node, str(i)).inc(i)
            g.labels(node, str(i)).set(i / 4)
            m.reconcile_seconds.observe(i / 100)
            if i < 10:
                h.labels(node, str(i)).observe(i / 10)
    """
)


def write(
    directory: Path,
    node: str,
    errors: int,
    policy: str = "eco",
    extra: bool | str = False,
    presize: bool = False,
) -> None:
    env = {"PROMETHEUS_MULTIPROC_DIR": str(directory), "PATH": "/usr/bin:/bin"}
    if "PYTHONPATH" in os.environ:  # writers and readers on the same prometheus_client
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    kind = extra if isinstance(extra, str) else "extra" if extra else "-"
    args = [node, str(errors), policy, kind, "presize" if presize else "-"]
    subprocess.run([sys.executable, "-c", WRITER, *args], env=env, check=True)


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def stock_text(directory: Path) -> str:
    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, path=str(directory))
    return generate_latest(registry).decode()


def samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def rendered(collector: FastMultiProcessCollector) -> Samples:
    return samples(collector.render().decode())


def lines_without_tombstones(text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if not line.endswith(" NaN"))


def test_same_text_as_the_stock_collector_value_for_value(tmp_path: Path) -> None:
    write(tmp_path, "node-a", errors=2, extra=True)
    write(tmp_path, "node-b", errors=0, policy="performance", extra=True)
    ours = FastMultiProcessCollector(str(tmp_path)).render().decode()
    stock = stock_text(tmp_path)
    # Line for line, in any order: the stock collector's order follows the directory listing.
    assert sorted(ours.splitlines()) == lines_without_tombstones(stock)
    assert "NaN" not in ours
    values = samples(ours)
    assert values[("joulie_reconcile_errors_total", (("node", "node-a"),))] == 2.0
    assert values[("joulie_dvfs_throttle_pct", (("node", "node-b"),))] == 20.0
    # Histograms merge across workers: 2 workers x 3 observations.
    assert values[("agentpool_reconcile_duration_seconds_count", ())] == 6.0
    assert values[("agentpool_reconcile_duration_seconds_bucket", (("le", "0.005"),))] == 2.0
    # The gauge modes really differ, so the comparison above covers each rule.
    assert values[("mode_livesum", (("k", "v"),))] == 5.5
    assert values[("mode_min", (("k", "v"),))] == 1.5
    assert values[("mode_max", (("k", "v"),))] == 4.0
    assert values[("mode_mostrecent", (("k", "v"),))] == 4.0  # node-b wrote last
    assert len([k for k in values if k[0] == "mode_all"]) == 2  # one per process, pid label
    assert values[("odd_labels_total", (("v", "Grüße ⚡"),))] == 5.5
    assert values[("odd_labels_total", (("v", 'say "hi"'),))] == 5.5
    assert values[("odd_labels_total", (("v", "two\nlines"),))] == 5.5
    assert values[("request_size_bytes_count", (("node", "shared"),))] == 2.0
    assert values[("labelled_seconds_bucket", (("le", "2.5"), ("route", 'a"b')))] == 1.0
    assert values[("labelled_seconds_bucket", (("le", "+Inf"), ("route", 'a"b')))] == 2.0


@pytest.mark.parametrize("nodes", [["node-a"], ["node-a", "node-b", "node-c"]])
def test_same_values_as_the_stock_collector_for_the_workers_series(
    tmp_path: Path, nodes: list[str]
) -> None:
    for i, node in enumerate(nodes):
        write(tmp_path, node, errors=i)
    ours = rendered(FastMultiProcessCollector(str(tmp_path)))
    stock = {k: v for k, v in samples(stock_text(tmp_path)).items() if not math.isnan(v)}
    assert ours == stock


def test_cached_keys_follow_appends_and_value_changes(tmp_path: Path) -> None:
    collector = FastMultiProcessCollector(str(tmp_path))
    write(tmp_path, "node-a", errors=1)
    assert rendered(collector)[("joulie_reconcile_errors_total", (("node", "node-a"),))] == 1.0
    # Same file id again (a restarted worker): values change in place, new series append.
    write(tmp_path, "node-a", errors=3)
    write(tmp_path, "node-c", errors=0)
    after = rendered(collector)
    assert after[("joulie_reconcile_errors_total", (("node", "node-a"),))] == 4.0
    assert ("joulie_backend_mode", (("mode", "dvfs"), ("node", "node-c"))) in after
    assert sorted(collector.render().decode().splitlines()) == lines_without_tombstones(
        stock_text(tmp_path)
    )


def test_nan_gauges_are_tombstones(tmp_path: Path) -> None:
    write(tmp_path, "node-a", errors=0, policy="performance")
    ours = rendered(FastMultiProcessCollector(str(tmp_path)))
    caps = {k: v for k, v in ours.items() if k[0] == "joulie_policy_cap_watts"}
    assert caps == {
        ("joulie_policy_cap_watts", (("node", "node-a"), ("policy", "performance"))): 200.0
    }
    stock = samples(stock_text(tmp_path))
    stale = ("joulie_policy_cap_watts", (("node", "node-a"), ("policy", "eco")))
    assert math.isnan(stock[stale]), "the stock collector would export the stale series as NaN"


def test_removed_files_disappear_from_the_next_scrape(tmp_path: Path) -> None:
    collector = FastMultiProcessCollector(str(tmp_path))
    write(tmp_path, "node-a", errors=0)
    write(tmp_path, "node-b", errors=0)
    assert any(k[1] == (("node", "node-b"),) for k in rendered(collector))
    for path in tmp_path.glob("*_n-node-b-*.db"):
        path.unlink()
    assert not any(("node", "node-b") in k[1] for k in rendered(collector))


def test_an_empty_or_missing_directory_renders_nothing(tmp_path: Path) -> None:
    assert FastMultiProcessCollector(str(tmp_path)).render() == b""
    assert FastMultiProcessCollector(str(tmp_path / "missing")).render() == b""


def test_presized_files_render_the_same_before_and_after_they_grow(tmp_path: Path) -> None:
    stock_sized, presized = tmp_path / "stock", tmp_path / "presized"
    for directory, presize in ((stock_sized, False), (presized, True)):
        directory.mkdir()
        write(directory, "node-a", errors=2, presize=presize)
    small = {p.name: p.stat().st_size for p in presized.glob("*.db")}
    assert set(small.values()) == {METRICS_FILE_BYTES}, small
    assert {p.stat().st_size for p in stock_sized.glob("*.db")} == {64 * 1024}
    ours = FastMultiProcessCollector(str(presized))
    assert ours.render() == FastMultiProcessCollector(str(stock_sized)).render()
    assert stock_text(presized) == stock_text(stock_sized)
    # The same node again (a restarted worker) with enough series to outgrow 4 KiB: its
    # files keep their size, prometheus_client doubles them, every series still reads.
    for directory, presize in ((stock_sized, False), (presized, True)):
        write(directory, "node-a", errors=1, extra="many", presize=presize)
    grown = {p.name: p.stat().st_size for p in presized.glob("*.db")}
    assert all(grown[name] > METRICS_FILE_BYTES for name in small), grown
    text = ours.render()
    assert text == FastMultiProcessCollector(str(stock_sized)).render()
    assert stock_text(presized) == stock_text(stock_sized)
    values = samples(text.decode())
    assert values[("joulie_reconcile_errors_total", (("node", "node-a"),))] == 3.0
    assert values[("joulie_bench_many_total", (("i", "149"), ("node", "node-a")))] == 149.0
    assert values[("joulie_bench_many_g", (("i", "149"), ("node", "node-a")))] == 37.25
    assert values[("agentpool_reconcile_duration_seconds_count", ())] == 6.0 + 150.0
    bucket = ("joulie_bench_many_h_bucket", (("i", "9"), ("le", "1.0"), ("node", "node-a")))
    assert values[bucket] == 1.0
