"""The joulie_* metrics (docs/metrics.md): names, types, labels, one-hot mode, tombstones."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agentpool.controller.metrics import NodeMetrics
from agentpool.results import Backend
from tests.support.joulie_dashboards import AGENT_METRICS

# name -> (type, label names): the contract's table, which is what Joulie's agent exports.
CONTRACT = AGENT_METRICS


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every joulie_* sample as the text exposition shows it (name, sorted labels) -> value."""
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("joulie_") and not s.name.endswith("_created"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def families(registry: CollectorRegistry) -> dict[str, tuple[str, tuple[str, ...]]]:
    """joulie_* sample name -> (family type, label names of its samples)."""
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name.startswith("joulie_") and not s.name.endswith("_created"):
                out[s.name] = (family.type, tuple(s.labels))
    return out


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def exercise(m: NodeMetrics) -> None:
    m.set_backend(Backend.DVFS)
    m.set_cap("worker-0", 120.0)
    m.set_rapl(
        {"intel-rapl:0": 1_000, "intel-rapl:1": 2_000}, {"intel-rapl:0": 60.5, "intel-rapl:1": 59.5}
    )
    m.set_dvfs(130.0, 125.5, 20, 1, 0)
    m.count_action("throttle_up")
    m.count_action("throttle_up")
    m.count_action("throttle_down")
    m.set_cpu_freq("0", 1_400_000, 1_500_000)
    m.set_cpu_freq("4", 1_450_000, 1_500_000)
    m.count_error()


def test_all_14_metrics_with_contract_names_types_and_labels(registry: CollectorRegistry) -> None:
    exercise(NodeMetrics("worker-0", registry=registry))
    assert families(registry) == CONTRACT


def test_exact_samples(registry: CollectorRegistry) -> None:
    exercise(NodeMetrics("worker-0", registry=registry))
    n = ("node", "worker-0")
    assert samples(registry) == {
        ("joulie_backend_mode", (("mode", "dvfs"), n)): 1.0,
        ("joulie_backend_mode", (("mode", "none"), n)): 0.0,
        ("joulie_backend_mode", (("mode", "rapl"), n)): 0.0,
        ("joulie_policy_cap_watts", (n, ("policy", "worker-0"))): 120.0,
        ("joulie_rapl_energy_uj", (n, ("zone", "intel-rapl:0"))): 1000.0,
        ("joulie_rapl_energy_uj", (n, ("zone", "intel-rapl:1"))): 2000.0,
        ("joulie_rapl_estimated_power_watts", (n, ("zone", "intel-rapl:0"))): 60.5,
        ("joulie_rapl_estimated_power_watts", (n, ("zone", "intel-rapl:1"))): 59.5,
        ("joulie_rapl_package_total_power_watts", (n,)): 120.0,
        ("joulie_dvfs_observed_power_watts", (n,)): 130.0,
        ("joulie_dvfs_ema_power_watts", (n,)): 125.5,
        ("joulie_dvfs_throttle_pct", (n,)): 20.0,
        ("joulie_dvfs_above_trip_count", (n,)): 1.0,
        ("joulie_dvfs_below_trip_count", (n,)): 0.0,
        ("joulie_dvfs_actions_total", (("action", "throttle_down"), n)): 1.0,
        ("joulie_dvfs_actions_total", (("action", "throttle_up"), n)): 2.0,
        ("joulie_dvfs_cpu_cur_freq_khz", (("cpu", "0"), n)): 1_400_000.0,
        ("joulie_dvfs_cpu_cur_freq_khz", (("cpu", "4"), n)): 1_450_000.0,
        ("joulie_dvfs_cpu_max_freq_khz", (("cpu", "0"), n)): 1_500_000.0,
        ("joulie_dvfs_cpu_max_freq_khz", (("cpu", "4"), n)): 1_500_000.0,
        ("joulie_reconcile_errors_total", (n,)): 1.0,
    }


def test_counters_exist_at_zero_from_the_start(registry: CollectorRegistry) -> None:
    NodeMetrics("worker-0", registry=registry)
    n = ("node", "worker-0")
    assert samples(registry) == {
        ("joulie_dvfs_actions_total", (("action", "throttle_down"), n)): 0.0,
        ("joulie_dvfs_actions_total", (("action", "throttle_up"), n)): 0.0,
        ("joulie_reconcile_errors_total", (n,)): 0.0,
    }


@pytest.mark.parametrize("active", list(Backend))
def test_backend_mode_is_one_hot(registry: CollectorRegistry, active: Backend) -> None:
    m = NodeMetrics("n", registry=registry)
    m.set_backend(Backend.RAPL)
    m.set_backend(active)
    got = {
        b.value: registry.get_sample_value("joulie_backend_mode", {"node": "n", "mode": b.value})
        for b in Backend
    }
    assert got == {b.value: 1.0 if b is active else 0.0 for b in Backend}


def cap(registry: CollectorRegistry, policy: str) -> float | None:
    return registry.get_sample_value("joulie_policy_cap_watts", {"node": "n", "policy": policy})


def test_cap_tombstone_when_the_policy_label_changes(registry: CollectorRegistry) -> None:
    m = NodeMetrics("n", registry=registry)
    m.set_cap("eco", 120.0)
    m.set_cap("eco", 110.0)
    assert cap(registry, "eco") == 110.0
    m.set_cap("performance", 300.0)
    old = cap(registry, "eco")
    assert old is not None
    assert math.isnan(old)  # the tombstone the supervisor's collector drops
    assert cap(registry, "performance") == 300.0
    m.set_cap(None, None)  # nothing to enforce any more
    now = cap(registry, "performance")
    assert now is not None
    assert math.isnan(now)


def test_cap_error_is_power_minus_cap_and_tombstoned_off_dvfs(registry: CollectorRegistry) -> None:
    m = NodeMetrics("n", registry=registry)

    def error() -> float | None:
        return registry.get_sample_value("joulie_dvfs_cap_error_watts", {"node": "n"})

    assert error() is None  # nothing before DVFS ever ran
    m.set_cap_error(48.0)
    assert error() == 48.0
    m.set_cap_error(-3.5)
    assert error() == -3.5
    m.set_cap_error(None)  # RAPL took over: no stale error for a dashboard to show
    gone = error()
    assert gone is not None
    assert math.isnan(gone)


def test_vanished_rapl_zone_is_tombstoned(registry: CollectorRegistry) -> None:
    m = NodeMetrics("n", registry=registry)
    m.set_rapl({"intel-rapl:0": 1, "intel-rapl:1": 2}, {})
    m.set_rapl({"intel-rapl:0": 3}, {"intel-rapl:0": 50.0})
    gone = registry.get_sample_value("joulie_rapl_energy_uj", {"node": "n", "zone": "intel-rapl:1"})
    assert gone is not None
    assert math.isnan(gone)
    assert registry.get_sample_value("joulie_rapl_package_total_power_watts", {"node": "n"}) == 50.0


def test_priming_sample_sets_no_power(registry: CollectorRegistry) -> None:
    m = NodeMetrics("n", registry=registry)
    m.set_rapl({"intel-rapl:0": 1}, {})
    assert (
        registry.get_sample_value("joulie_rapl_energy_uj", {"node": "n", "zone": "intel-rapl:0"})
        == 1
    )
    assert registry.get_sample_value("joulie_rapl_package_total_power_watts", {"node": "n"}) is None
    m.set_dvfs(None, None, 0, 0, 0)
    assert registry.get_sample_value("joulie_dvfs_observed_power_watts", {"node": "n"}) is None
    assert registry.get_sample_value("joulie_dvfs_throttle_pct", {"node": "n"}) == 0


def test_gauges_vanish_with_their_worker_in_multiprocess_mode(registry: CollectorRegistry) -> None:
    # "live*" modes drop a dead pid's values: a node that leaves leaves no gauge behind.
    m = NodeMetrics("n", registry=registry)
    gauges = [g for g in vars(m).values() if type(g).__name__ == "Gauge"]
    assert len(gauges) == 16  # 13, and 3 for the NodeTwin API (docs/metrics.md)
    assert {g._multiprocess_mode for g in gauges} <= {
        "livesum",
        "liveall",
        "livemax",
        "livemin",
        "livemostrecent",
    }
