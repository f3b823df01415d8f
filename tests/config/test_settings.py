"""Settings from raw flag/env values (docs/configuration.md): defaults, parsing, every error."""

from __future__ import annotations

import dataclasses

import pytest

from agentpool.config.options import (
    DIAGNOSTICS,
    OPTIONS,
    AgentMode,
    DvfsControllerKind,
    JoulieApi,
    LogFormat,
    Membership,
    StaleAction,
    defaults,
)
from agentpool.config.settings import (
    DiagnosticsSettings,
    DvfsSettings,
    ElasticSettings,
    Settings,
    load_settings,
)
from agentpool.errors import ConfigError
from agentpool.pool.assignment import Assignment
from agentpool.resources.routing import (
    ControlMode,
    ControlType,
    HttpEndpoint,
    NodeRouting,
    Routing,
    SourceType,
)
from agentpool.sim import workerfaults

POOL = {"AGENT_MODE": "pool"}
DAEMON = {"NODE_NAME": "worker-0"}

CONTRACT_DEFAULTS = {
    "AGENT_MODE": "daemonset",
    "RECONCILE_INTERVAL": "20s",
    "SIMULATE_ONLY": "false",
    "METRICS_ADDR": ":8080",
    "POOL_NODE_SELECTOR": "joulie.io/managed=true",
    "POOL_SHARDS": "1",
    "SYSFS_ROOT": "/host-sys",
    "DVFS_EMA_ALPHA": "0.30",
    "DVFS_HIGH_MARGIN_W": "10",
    "DVFS_LOW_MARGIN_W": "15",
    "DVFS_TRIP_COUNT": "2",
    "DVFS_COOLDOWN": "20s",
    "DVFS_STEP_PCT": "10",
    "DVFS_MIN_FREQ_KHZ": "1500000",
    "RESTORE_ON_EXIT": "true",
}


def test_option_table_has_the_contract_variables_and_defaults() -> None:
    table = defaults()
    for env, default in CONTRACT_DEFAULTS.items():
        assert table[env] == default, env
    for env in ("NODE_NAME", "POOL_SHARD_ID", "POD_NAME", "KUBECONFIG"):
        assert table[env] is None, env
    assert len({o.env for o in OPTIONS}) == len(OPTIONS)
    assert len({o.flag for o in OPTIONS}) == len(OPTIONS)
    assert next(o for o in OPTIONS if o.env == "DVFS_MIN_FREQ_KHZ").flag == "--dvfs-min-freq-khz"


def test_defaults_build_the_documented_settings() -> None:
    s = load_settings(DAEMON)
    assert s == Settings(node_name="worker-0")
    assert s.mode is AgentMode.DAEMONSET
    assert s.reconcile_interval_s == 20.0
    assert s.simulate_only is False
    assert (s.metrics_host, s.metrics_port) == ("", 8080)
    assert s.pool_node_selector == "joulie.io/managed=true"
    assert (s.pool_shards, s.pool_shard_id) == (1, 0)
    assert s.sysfs_root == "/host-sys"
    assert s.dvfs == DvfsSettings(0.30, 10.0, 15.0, 2, 20.0, 10, 1_500_000)
    assert s.dvfs.controller is DvfsControllerKind.ADAPTIVE
    assert (s.dvfs.target_pct, s.dvfs.hold_band_pct, s.dvfs.max_step_pct) == (96.0, 3.5, 50)
    assert s.restore_on_exit is True
    assert s.heartbeat_timeout_s is None  # derived per node by the supervisor
    assert s.log_format is LogFormat.TEXT
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.node_name = "other"  # type: ignore[misc]


def test_every_value_parses() -> None:
    s = load_settings(
        {
            "AGENT_MODE": " POOL ",
            "RECONCILE_INTERVAL": "1m30s",
            "SIMULATE_ONLY": "yes",
            "METRICS_ADDR": "[::1]:9090",
            "POOL_NODE_SELECTOR": "joulie.io/managed=true,tier in (a,b)",
            "POOL_SHARDS": "4",
            "POOL_SHARD_ID": "3",
            "SYSFS_ROOT": "/tmp/sys/{node}",
            "KUBECONFIG": "/etc/kube.conf",
            "DVFS_EMA_ALPHA": "1",
            "DVFS_HIGH_MARGIN_W": "0",
            "DVFS_LOW_MARGIN_W": "2.5",
            "DVFS_TRIP_COUNT": "1",
            "DVFS_COOLDOWN": "0",
            "DVFS_STEP_PCT": "100",
            "DVFS_MIN_FREQ_KHZ": "800000",
            "DVFS_CONTROLLER": " Joulie",
            "DVFS_TARGET_PCT": "90",
            "DVFS_HOLD_BAND_PCT": "20",
            "DVFS_MAX_STEP_PCT": "100",
            "RESTORE_ON_EXIT": "off",
            "HEARTBEAT_TIMEOUT": "45s",
            "LOG_FORMAT": "JSON",
            "LOG_LEVEL": "Debug",
        }
    )
    assert s.mode is AgentMode.POOL
    assert s.reconcile_interval_s == 90.0
    assert s.simulate_only is True
    assert (s.metrics_host, s.metrics_port) == ("::1", 9090)
    assert (s.pool_shards, s.pool_shard_id) == (4, 3)
    assert s.sysfs_root_for("worker-7") == "/tmp/sys/worker-7"
    assert s.kubeconfig == "/etc/kube.conf"
    assert s.dvfs == DvfsSettings(
        1.0, 0.0, 2.5, 1, 0.0, 100, 800_000, DvfsControllerKind.JOULIE, 90.0, 20.0, 100
    )
    assert s.restore_on_exit is False
    assert s.heartbeat_timeout_s == 45.0
    assert s.log_format is LogFormat.JSON
    assert s.log_level == "debug"


@pytest.mark.parametrize(
    ("raw", "shard_id"),
    [
        ({"POOL_SHARDS": "4", "POD_NAME": "joulie-agent-pool-3"}, 3),
        ({"POOL_SHARDS": "4", "POD_NAME": "joulie-agent-pool-0"}, 0),
        # An explicit POOL_SHARD_ID wins over the ordinal.
        ({"POOL_SHARDS": "4", "POD_NAME": "joulie-agent-pool-3", "POOL_SHARD_ID": "1"}, 1),
        ({"POOL_SHARDS": "1"}, 0),
        ({"POOL_SHARDS": "0"}, 0),
        ({"POOL_SHARDS": "4", "POD_NAME": "joulie-agent-pool-2", "POOL_SHARD_ID": ""}, 2),
    ],
)
def test_shard_id_from_pool_shard_id_or_pod_ordinal(raw: dict[str, str], shard_id: int) -> None:
    assert load_settings({**POOL, **raw}).pool_shard_id == shard_id


def test_diagnostics_default_to_what_production_runs_and_parse() -> None:
    assert load_settings(POOL).diagnostics == DiagnosticsSettings(
        pack_code=True, type_tags=True, immortalize=True, fill_holes=True, proctitle=True,
        worker_hook=None,
    )
    hook = workerfaults.hook_spec("idle:a,raise-in-tick:b")
    off = load_settings({**POOL, "AGENTPOOL_PACK_CODE": "0", "AGENTPOOL_TYPE_TAGS": "false",
                         "AGENTPOOL_IMMORTALIZE": "off", "AGENTPOOL_FILL_HOLES": "no",
                         "AGENTPOOL_PROCTITLE": "0", "AGENTPOOL_WORKER_HOOK": f" {hook} "})
    assert off.diagnostics == DiagnosticsSettings(False, False, False, False, False, hook)
    assert all(opt.help.startswith(DIAGNOSTICS) for opt in OPTIONS if opt.env.startswith(
        "AGENTPOOL_"))


def test_none_values_take_the_default() -> None:
    raw: dict[str, str | None] = {opt.env: None for opt in OPTIONS}
    raw["NODE_NAME"] = "n"
    assert load_settings(raw) == Settings(node_name="n")


# Every configuration error: (raw values, variable named, bad value named).
ERRORS: list[tuple[dict[str, str], str, str]] = [
    ({"AGENT_MODE": "bogus"}, "AGENT_MODE", "bogus"),
    ({"AGENT_MODE": ""}, "AGENT_MODE", ""),
    ({}, "NODE_NAME", ""),
    ({"NODE_NAME": "  "}, "NODE_NAME", "  "),
    ({**POOL, "RECONCILE_INTERVAL": "soon"}, "RECONCILE_INTERVAL", "soon"),
    ({**POOL, "RECONCILE_INTERVAL": "20"}, "RECONCILE_INTERVAL", "20"),
    ({**POOL, "RECONCILE_INTERVAL": "-5s"}, "RECONCILE_INTERVAL", "-5s"),
    ({**POOL, "RECONCILE_INTERVAL": "0s"}, "RECONCILE_INTERVAL", "0s"),
    ({**POOL, "SIMULATE_ONLY": "maybe"}, "SIMULATE_ONLY", "maybe"),
    ({**POOL, "METRICS_ADDR": "8080"}, "METRICS_ADDR", "8080"),
    ({**POOL, "METRICS_ADDR": ":http"}, "METRICS_ADDR", ":http"),
    ({**POOL, "METRICS_ADDR": ":70000"}, "METRICS_ADDR", ":70000"),
    ({**POOL, "METRICS_ADDR": ":-1"}, "METRICS_ADDR", ":-1"),
    ({**POOL, "POOL_NODE_SELECTOR": "tier in (a,b"}, "POOL_NODE_SELECTOR", "tier in (a,b"),
    ({**POOL, "POOL_NODE_SELECTOR": "=x"}, "POOL_NODE_SELECTOR", "=x"),
    ({**POOL, "POOL_SHARDS": "two"}, "POOL_SHARDS", "two"),
    ({**POOL, "POOL_SHARDS": "-1"}, "POOL_SHARDS", "-1"),
    ({**POOL, "POOL_SHARDS": "2", "POOL_SHARD_ID": "5"}, "POOL_SHARD_ID", "5"),
    ({**POOL, "POOL_SHARDS": "2", "POOL_SHARD_ID": "2"}, "POOL_SHARD_ID", "2"),
    ({**POOL, "POOL_SHARDS": "2", "POOL_SHARD_ID": "x"}, "POOL_SHARD_ID", "x"),
    ({**POOL, "POOL_SHARDS": "2", "POOL_SHARD_ID": "-1"}, "POOL_SHARD_ID", "-1"),
    ({**POOL, "POOL_SHARDS": "1", "POOL_SHARD_ID": "1"}, "POOL_SHARD_ID", "1"),
    # No shard id at all with several shards: naming POOL_SHARD_ID says what to set.
    ({**POOL, "POOL_SHARDS": "3"}, "POOL_SHARD_ID", ""),
    ({**POOL, "POOL_SHARDS": "3", "POD_NAME": "agent"}, "POOL_SHARD_ID", ""),
    (
        {**POOL, "POOL_SHARDS": "2", "POD_NAME": "joulie-agent-pool-7"},
        "POD_NAME",
        "joulie-agent-pool-7",
    ),
    ({**POOL, "SYSFS_ROOT": " "}, "SYSFS_ROOT", ""),
    ({**POOL, "DVFS_CONTROLLER": "pid"}, "DVFS_CONTROLLER", "pid"),
    ({**POOL, "DVFS_TARGET_PCT": "49"}, "DVFS_TARGET_PCT", "49"),
    ({**POOL, "DVFS_TARGET_PCT": "101"}, "DVFS_TARGET_PCT", "101"),
    ({**POOL, "DVFS_TARGET_PCT": "96%"}, "DVFS_TARGET_PCT", "96%"),
    ({**POOL, "DVFS_HOLD_BAND_PCT": "0"}, "DVFS_HOLD_BAND_PCT", "0"),
    ({**POOL, "DVFS_HOLD_BAND_PCT": "21"}, "DVFS_HOLD_BAND_PCT", "21"),
    # Within range alone, but 100 + 15 would hold still at 115% of the cap.
    ({**POOL, "DVFS_TARGET_PCT": "100", "DVFS_HOLD_BAND_PCT": "15"}, "DVFS_HOLD_BAND_PCT", "15"),
    ({**POOL, "DVFS_MAX_STEP_PCT": "0"}, "DVFS_MAX_STEP_PCT", "0"),
    ({**POOL, "DVFS_MAX_STEP_PCT": "101"}, "DVFS_MAX_STEP_PCT", "101"),
    ({**POOL, "DVFS_EMA_ALPHA": "0"}, "DVFS_EMA_ALPHA", "0"),
    ({**POOL, "DVFS_EMA_ALPHA": "1.5"}, "DVFS_EMA_ALPHA", "1.5"),
    ({**POOL, "DVFS_EMA_ALPHA": "nan"}, "DVFS_EMA_ALPHA", "nan"),
    ({**POOL, "DVFS_EMA_ALPHA": "high"}, "DVFS_EMA_ALPHA", "high"),
    ({**POOL, "DVFS_HIGH_MARGIN_W": "-1"}, "DVFS_HIGH_MARGIN_W", "-1"),
    ({**POOL, "DVFS_HIGH_MARGIN_W": "10W"}, "DVFS_HIGH_MARGIN_W", "10W"),
    ({**POOL, "DVFS_LOW_MARGIN_W": "-0.5"}, "DVFS_LOW_MARGIN_W", "-0.5"),
    ({**POOL, "DVFS_LOW_MARGIN_W": "inf"}, "DVFS_LOW_MARGIN_W", "inf"),
    ({**POOL, "DVFS_TRIP_COUNT": "0"}, "DVFS_TRIP_COUNT", "0"),
    ({**POOL, "DVFS_TRIP_COUNT": "1.5"}, "DVFS_TRIP_COUNT", "1.5"),
    ({**POOL, "DVFS_COOLDOWN": "-1s"}, "DVFS_COOLDOWN", "-1s"),
    ({**POOL, "DVFS_COOLDOWN": "20"}, "DVFS_COOLDOWN", "20"),
    ({**POOL, "DVFS_STEP_PCT": "0"}, "DVFS_STEP_PCT", "0"),
    ({**POOL, "DVFS_STEP_PCT": "101"}, "DVFS_STEP_PCT", "101"),
    ({**POOL, "DVFS_STEP_PCT": "ten"}, "DVFS_STEP_PCT", "ten"),
    ({**POOL, "DVFS_MIN_FREQ_KHZ": "0"}, "DVFS_MIN_FREQ_KHZ", "0"),
    ({**POOL, "DVFS_MIN_FREQ_KHZ": "1.5GHz"}, "DVFS_MIN_FREQ_KHZ", "1.5GHz"),
    ({**POOL, "RESTORE_ON_EXIT": "perhaps"}, "RESTORE_ON_EXIT", "perhaps"),
    ({**POOL, "SHUTDOWN_TIMEOUT": "0s"}, "SHUTDOWN_TIMEOUT", "0s"),
    ({**POOL, "SHUTDOWN_TIMEOUT": "long"}, "SHUTDOWN_TIMEOUT", "long"),
    ({**POOL, "HEARTBEAT_TIMEOUT": "0"}, "HEARTBEAT_TIMEOUT", "0"),
    ({**POOL, "HEARTBEAT_TIMEOUT": "90"}, "HEARTBEAT_TIMEOUT", "90"),
    ({**POOL, "WATCH_TIMEOUT": "-1m"}, "WATCH_TIMEOUT", "-1m"),
    ({**POOL, "LOG_FORMAT": "xml"}, "LOG_FORMAT", "xml"),
    ({**POOL, "POOL_MEMBERSHIP": "dynamic"}, "POOL_MEMBERSHIP", "dynamic"),
    ({**POOL, "POOL_ASSIGNMENT": "hash"}, "POOL_ASSIGNMENT", "hash"),
    ({**POOL, "POOL_LEASE_DURATION": "15"}, "POOL_LEASE_DURATION", "15"),
    ({**POOL, "POOL_LEASE_RENEW": "0s"}, "POOL_LEASE_RENEW", "0s"),
    ({**POOL, "POOL_LEASE_DURATION": "10s", "POOL_LEASE_RENEW": "6s"}, "POOL_LEASE_RENEW", "6s"),
    ({**POOL, "POOL_MEMBERSHIP": "lease", "POD_NAMESPACE": "ns"}, "POD_NAME", ""),
    ({**POOL, "POOL_MEMBERSHIP": "lease", "POD_NAME": "pool-0"}, "POD_NAMESPACE", ""),
    (
        {**POOL, "POOL_MEMBERSHIP": "lease", "POD_NAME": "agent", "POD_NAMESPACE": "ns"},
        "POOL_STATEFULSET",
        "",
    ),
    ({**POOL, "LOG_LEVEL": "verbose"}, "LOG_LEVEL", "verbose"),
    ({**POOL, "JOULIE_API": "v2"}, "JOULIE_API", "v2"),
    ({**POOL, "EVENTS": "sometimes"}, "EVENTS", "sometimes"),
    ({**POOL, "TELEMETRY_CPU_SOURCE": "prometheus"}, "TELEMETRY_CPU_SOURCE", "prometheus"),
    ({**POOL, "TELEMETRY_CPU_SOURCE": "http"}, "TELEMETRY_CPU_HTTP_ENDPOINT", ""),
    (
        {**POOL, "TELEMETRY_CPU_SOURCE": "http", "TELEMETRY_CPU_HTTP_ENDPOINT": "sim:80/t"},
        "TELEMETRY_CPU_HTTP_ENDPOINT",
        "sim:80/t",
    ),
    ({**POOL, "TELEMETRY_CPU_CONTROL": "bmc"}, "TELEMETRY_CPU_CONTROL", "bmc"),
    ({**POOL, "TELEMETRY_CPU_CONTROL": "http"}, "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT", ""),
    (
        {
            **POOL,
            "TELEMETRY_CPU_CONTROL": "http",
            "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT": "ftp://sim/{node}",
        },
        "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT",
        "ftp://sim/{node}",
    ),
    ({**POOL, "TELEMETRY_CPU_CONTROL_MODE": "msr"}, "TELEMETRY_CPU_CONTROL_MODE", "msr"),
    ({**POOL, "TELEMETRY_GPU_CONTROL": "nvml"}, "TELEMETRY_GPU_CONTROL", "nvml"),
    ({**POOL, "TELEMETRY_GPU_CONTROL": "http"}, "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT", ""),
    ({**POOL, "TELEMETRY_HTTP_TIMEOUT_SECONDS": "2.5"}, "TELEMETRY_HTTP_TIMEOUT_SECONDS", "2.5"),
    ({**POOL, "TELEMETRY_HTTP_TIMEOUT_SECONDS": "0"}, "TELEMETRY_HTTP_TIMEOUT_SECONDS", "0"),
    ({**POOL, "SPEC_READ_TIMEOUT": "5"}, "SPEC_READ_TIMEOUT", "5"),
    ({**POOL, "SPEC_STALE_ACTION": "panic"}, "SPEC_STALE_ACTION", "panic"),
    ({**POOL, "HTTP_CA_BUNDLE": "/nonexistent/ca.crt"}, "HTTP_CA_BUNDLE", "/nonexistent/ca.crt"),
    ({**POOL, "HTTP_TOKEN_FILE": "/nonexistent/token"}, "HTTP_TOKEN_FILE", "/nonexistent/token"),
    ({**POOL, "HTTP_CLIENT_KEY": "/tls.key"}, "HTTP_CLIENT_CERT", ""),
    ({**POOL, "HTTP_CLIENT_CERT": "/tls.crt"}, "HTTP_CLIENT_KEY", ""),
    ({**POOL, "AGENTPOOL_PACK_CODE": "0.5"}, "AGENTPOOL_PACK_CODE", "0.5"),
    ({**POOL, "AGENTPOOL_TYPE_TAGS": "later"}, "AGENTPOOL_TYPE_TAGS", "later"),
    ({**POOL, "AGENTPOOL_IMMORTALIZE": "2"}, "AGENTPOOL_IMMORTALIZE", "2"),
    ({**POOL, "AGENTPOOL_FILL_HOLES": "none"}, "AGENTPOOL_FILL_HOLES", "none"),
    ({**POOL, "AGENTPOOL_PROCTITLE": "-"}, "AGENTPOOL_PROCTITLE", "-"),
    # A hook is checked by loading it: no function, no module, a factory that refuses.
    ({**POOL, "AGENTPOOL_WORKER_HOOK": "agentpool.sim"}, "AGENTPOOL_WORKER_HOOK", "agentpool.sim"),
    (
        {**POOL, "AGENTPOOL_WORKER_HOOK": "agentpool.sim.nothing:faults"},
        "AGENTPOOL_WORKER_HOOK",
        "agentpool.sim.nothing:faults",
    ),
    (
        {**POOL, "AGENTPOOL_WORKER_HOOK": "agentpool.sim.workerfaults:faults=explode:a"},
        "AGENTPOOL_WORKER_HOOK",
        "agentpool.sim.workerfaults:faults=explode:a",
    ),
]


@pytest.mark.parametrize(("raw", "variable", "value"), ERRORS, ids=[e[1] for e in ERRORS])
def test_every_configuration_error_names_variable_and_value(
    raw: dict[str, str], variable: str, value: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(raw)
    err = caught.value
    assert err.variable == variable
    assert str(err.value).strip() == value.strip()
    message = str(err)
    assert message.startswith(f"{variable}=")
    assert repr(err.value) in message
    assert "invalid: " in message
    assert err.accepted


def test_error_table_covers_every_validated_variable() -> None:
    # Variables that are free text by nature (a path, a name) cannot be malformed.
    free_text = {"KUBECONFIG", "PROMETHEUS_MULTIPROC_DIR", "STATE_DIR"}
    assert {o.env for o in OPTIONS} - free_text == {variable for _, variable, _ in ERRORS}


def test_env_routing_defaults_to_host_and_reads_every_variable() -> None:
    assert load_settings(POOL).routing == NodeRouting()
    settings = load_settings(
        {
            **POOL,
            "TELEMETRY_CPU_SOURCE": "HTTP",
            "TELEMETRY_CPU_HTTP_ENDPOINT": "http://sim:18080/telemetry/{node}",
            "TELEMETRY_CPU_CONTROL": "http",
            "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT": "https://bmc/control/{node}",
            "TELEMETRY_CPU_CONTROL_MODE": "dvfs",
            "TELEMETRY_GPU_CONTROL": "none",
            "TELEMETRY_HTTP_TIMEOUT_SECONDS": "7",
        }
    )
    assert settings.routing.cpu == Routing(
        source=SourceType.HTTP,
        source_http=HttpEndpoint("http://sim:18080/telemetry/{node}", 7.0),
        control=ControlType.HTTP,
        control_http=HttpEndpoint("https://bmc/control/{node}", 7.0),
        mode=ControlMode.DVFS,
    )
    assert settings.routing.gpu.control is ControlType.NONE
    # GPU telemetry rides on the CPU telemetry answer, as with a TelemetryProfile.
    assert settings.routing.gpu.telemetry_http == settings.routing.cpu.source_http
    assert settings.joulie_api is JoulieApi.AUTO
    assert settings.spec_read_timeout_s == 300.0
    assert settings.spec_stale_action is StaleAction.RELAX


def test_lease_membership_settings() -> None:
    s = load_settings({**POOL, "POOL_MEMBERSHIP": "Lease", "POD_NAME": "joulie-agent-pool-7",
                       "POD_NAMESPACE": "joulie", "POOL_ASSIGNMENT": "modulo",
                       "POOL_LEASE_DURATION": "6s", "POOL_LEASE_RENEW": "3s"})
    e = s.elastic
    assert e.lease
    assert (e.membership, e.assignment) == (Membership.LEASE, Assignment.MODULO)
    assert (e.lease_duration_s, e.renew_s) == (6.0, 3.0)
    assert (e.namespace, e.statefulset) == ("joulie", "joulie-agent-pool")
    # POOL_SHARDS does not bound the ordinal of an elastic pool's pods.
    assert s.pool_shard_id == 7
    named = load_settings({**POOL, "POOL_MEMBERSHIP": "lease", "POD_NAME": "agent",
                           "POD_NAMESPACE": "joulie", "POOL_STATEFULSET": "agents"})
    assert named.elastic.statefulset == "agents"


def test_static_membership_is_the_default_and_ignores_lease_requirements() -> None:
    s = load_settings(POOL)
    assert s.elastic == ElasticSettings()
    assert not s.elastic.lease
    assert s.elastic.assignment is Assignment.RENDEZVOUS
    assert (s.elastic.lease_duration_s, s.elastic.renew_s) == (15.0, 5.0)


@pytest.mark.parametrize("endpoint", ["http://[", "http://sim:abc/", "http://:", "http://sim/a b"])
def test_a_telemetry_endpoint_that_cannot_be_requested_exits_naming_it(endpoint: str) -> None:
    # Shrunk from tests/properties/test_resources.py: urlsplit raised ValueError on the first
    # (a traceback, not exit 2), and the others were accepted and failed every request.
    raw = {**POOL, "TELEMETRY_CPU_CONTROL": "http", "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT": endpoint}
    with pytest.raises(ConfigError) as caught:
        load_settings(raw)
    assert caught.value.variable == "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT"


def test_a_token_file_that_is_a_directory_exits_naming_it() -> None:
    # Shrunk from tests/properties/test_config.py (HTTP_TOKEN_FILE='/'): reading it raised
    # IsADirectoryError out of load_settings, a traceback instead of exit 2.
    with pytest.raises(ConfigError) as caught:
        load_settings({**POOL, "HTTP_TOKEN_FILE": "/"})
    assert caught.value.variable == "HTTP_TOKEN_FILE"
    assert "readable token file" in str(caught.value)
