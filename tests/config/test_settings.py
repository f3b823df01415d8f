"""Settings from raw flag/env values (docs/configuration.md): defaults, parsing, every error."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

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
from tests.support.config_errors import ERRORS, POOL

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
        pack_code=True, immortalize=True, fill_holes=True, proctitle=True,
        worker_hook=None,
    )
    hook = workerfaults.hook_spec("idle:a,raise-in-tick:b")
    off = load_settings({**POOL, "AGENTPOOL_PACK_CODE": "0", "AGENTPOOL_IMMORTALIZE": "off",
                         "AGENTPOOL_FILL_HOLES": "no", "AGENTPOOL_PROCTITLE": "0",
                         "AGENTPOOL_WORKER_HOOK": f" {hook} "})
    assert off.diagnostics == DiagnosticsSettings(False, False, False, False, hook)
    assert all(opt.help.startswith(DIAGNOSTICS) for opt in OPTIONS if opt.env.startswith(
        "AGENTPOOL_"))


def test_none_values_take_the_default() -> None:
    raw: dict[str, str | None] = {opt.env: None for opt in OPTIONS}
    raw["NODE_NAME"] = "n"
    assert load_settings(raw) == Settings(node_name="n")


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


SIM = "http://sim:18080"
"""An endpoint, for the values that need one beside them."""

# Values Joulie's agent runs with that agentpool's parsers refuse: each runs here, read as
# that agent reads it or as docs/joulie-compatibility.md says, and one note (logged once at
# start) names the variable and its value. (raw values, variable, what is read, expected)
JOULIE: list[tuple[dict[str, str], str, Callable[[Settings], object], object]] = [
    ({**POOL, "RECONCILE_INTERVAL": "0"}, "RECONCILE_INTERVAL",
     lambda s: s.reconcile_interval_s, 20.0),
    ({**POOL, "RECONCILE_INTERVAL": "-5s"}, "RECONCILE_INTERVAL",
     lambda s: s.reconcile_interval_s, 20.0),
    ({**POOL, "RECONCILE_INTERVAL": "20"}, "RECONCILE_INTERVAL",
     lambda s: s.reconcile_interval_s, 20.0),
    ({**POOL, "RECONCILE_INTERVAL": "soon"}, "RECONCILE_INTERVAL",
     lambda s: s.reconcile_interval_s, 20.0),
    ({**POOL, "SIMULATE_ONLY": "maybe"}, "SIMULATE_ONLY", lambda s: s.simulate_only, False),
    ({**POOL, "METRICS_ADDR": "9090"}, "METRICS_ADDR",
     lambda s: (s.metrics_host, s.metrics_port), ("", 9090)),
    ({**POOL, "METRICS_ADDR": "127.0.0.1"}, "METRICS_ADDR",
     lambda s: (s.metrics_host, s.metrics_port), ("127.0.0.1", 8080)),
    ({**POOL, "METRICS_ADDR": ":http"}, "METRICS_ADDR",
     lambda s: (s.metrics_host, s.metrics_port), ("", 80)),
    ({**POOL, "POOL_SHARDS": "2", "POOL_SHARD_ID": "x", "POD_NAME": "agent-pool-1"},
     "POOL_SHARD_ID", lambda s: s.pool_shard_id, 1),
    ({**POOL, "DVFS_EMA_ALPHA": "high"}, "DVFS_EMA_ALPHA", lambda s: s.dvfs.ema_alpha, 0.3),
    ({**POOL, "DVFS_HIGH_MARGIN_W": "10W"}, "DVFS_HIGH_MARGIN_W",
     lambda s: s.dvfs.high_margin_w, 10.0),
    ({**POOL, "DVFS_LOW_MARGIN_W": "a lot"}, "DVFS_LOW_MARGIN_W",
     lambda s: s.dvfs.low_margin_w, 15.0),
    ({**POOL, "DVFS_TRIP_COUNT": "1.5"}, "DVFS_TRIP_COUNT", lambda s: s.dvfs.trip_count, 2),
    ({**POOL, "DVFS_COOLDOWN": "-1s"}, "DVFS_COOLDOWN", lambda s: s.dvfs.cooldown_s, 0.0),
    ({**POOL, "DVFS_COOLDOWN": "20"}, "DVFS_COOLDOWN", lambda s: s.dvfs.cooldown_s, 20.0),
    ({**POOL, "DVFS_STEP_PCT": "ten"}, "DVFS_STEP_PCT", lambda s: s.dvfs.step_pct, 10),
    ({**POOL, "DVFS_MIN_FREQ_KHZ": "0"}, "DVFS_MIN_FREQ_KHZ", lambda s: s.dvfs.min_freq_khz, 1),
    ({**POOL, "DVFS_MIN_FREQ_KHZ": "1.5GHz"}, "DVFS_MIN_FREQ_KHZ",
     lambda s: s.dvfs.min_freq_khz, 1_500_000),
    ({**POOL, "SPEC_READ_TIMEOUT": "5"}, "SPEC_READ_TIMEOUT",
     lambda s: s.spec_read_timeout_s, 300.0),
    ({**POOL, "SPEC_READ_TIMEOUT": "-1m"}, "SPEC_READ_TIMEOUT",
     lambda s: s.spec_read_timeout_s, 0.0),
    ({**POOL, "TELEMETRY_CPU_SOURCE": "prometheus"}, "TELEMETRY_CPU_SOURCE",
     lambda s: s.routing.cpu.source, SourceType.HOST),
    ({**POOL, "TELEMETRY_CPU_SOURCE": "http"}, "TELEMETRY_CPU_SOURCE",
     lambda s: (s.routing.cpu.source, s.routing.cpu.source_http), (SourceType.HOST, None)),
    ({**DAEMON, "TELEMETRY_CPU_CONTROL": "http"}, "TELEMETRY_CPU_CONTROL",
     lambda s: s.routing.cpu.control, ControlType.HOST),
    ({**DAEMON, "TELEMETRY_CPU_CONTROL": "bmc"}, "TELEMETRY_CPU_CONTROL",
     lambda s: s.routing.cpu.control, ControlType.HOST),
    ({**POOL, "TELEMETRY_CPU_CONTROL_MODE": "msr"}, "TELEMETRY_CPU_CONTROL_MODE",
     lambda s: s.routing.cpu.mode, ControlMode.AUTO),
    ({**POOL, "TELEMETRY_GPU_CONTROL": "nvml"}, "TELEMETRY_GPU_CONTROL",
     lambda s: s.routing.gpu.control, ControlType.HOST),
    ({**POOL, "TELEMETRY_GPU_CONTROL": "http"}, "TELEMETRY_GPU_CONTROL",
     lambda s: s.routing.gpu.control, ControlType.HOST),
    *(({**POOL, "TELEMETRY_CPU_SOURCE": "http", "TELEMETRY_CPU_HTTP_ENDPOINT": SIM,
        "TELEMETRY_HTTP_TIMEOUT_SECONDS": value}, "TELEMETRY_HTTP_TIMEOUT_SECONDS",
       lambda s: s.routing.cpu.source_http.timeout_s, seconds)  # type: ignore[union-attr]
      for value, seconds in (("0", 2.0), ("2.5", 2.0), ("-3", 2.0), ("600", 300.0))),
    ({**POOL, "KUBE_CLIENT_QPS": "fast"}, "KUBE_CLIENT_QPS", lambda s: s.api_limit, (50.0, 100)),
    ({**POOL, "KUBE_CLIENT_BURST": "lots"}, "KUBE_CLIENT_BURST",
     lambda s: s.api_limit, (50.0, 100)),
    # Set by Joulie's examples and experiments, read by neither agent.
    ({**POOL, "TELEMETRY_GPU_CONTROL_MODE": "rapl"}, "TELEMETRY_GPU_CONTROL_MODE",
     lambda s: s.routing.gpu, NodeRouting().gpu),
    ({**POOL, "JOULIE_CONTROL_MODE": "dvfs"}, "JOULIE_CONTROL_MODE",
     lambda s: s.routing, NodeRouting()),
]


@pytest.mark.parametrize(
    ("raw", "variable", "read", "expected"), JOULIE,
    ids=[f"{e[1]}={e[0].get(e[1])}" for e in JOULIE],
)
def test_values_joulies_agent_runs_with_run_here_and_are_said_once(
    raw: dict[str, str], variable: str, read: Callable[[Settings], object], expected: object
) -> None:
    settings = load_settings(raw)
    assert read(settings) == expected
    assert len(settings.notes) == 1, settings.notes
    (note,) = settings.notes
    assert note.startswith(f"{variable}={raw[variable]!r}: ") or note.startswith(
        f"{variable} is not read: "
    ), note
    assert "Joulie's agent" in note


def test_blank_is_unset_for_every_option() -> None:
    # Joulie's agent trims every value and takes a blank one as unset; so does a Helm value
    # rendered empty. Nothing is noted: it is the default.
    raw: dict[str, str | None] = {opt.env: " " for opt in OPTIONS}
    raw["NODE_NAME"] = "n"
    assert load_settings(raw) == Settings(node_name="n")


def test_the_values_joulies_experiments_pass_run_here() -> None:
    # The agent environment of Joulie's CPU-only and heterogeneous benchmark scripts and of
    # its integration runner (our own copy of the values they set).
    experiment = {
        **POOL,
        "RECONCILE_INTERVAL": "20s", "METRICS_ADDR": ":8080", "SIMULATE_ONLY": "false",
        "KUBE_CLIENT_QPS": "200", "KUBE_CLIENT_BURST": "400",
        "TELEMETRY_CPU_SOURCE": "http", "TELEMETRY_CPU_HTTP_ENDPOINT": SIM + "/telemetry/{node}",
        "TELEMETRY_CPU_CONTROL": "http",
        "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT": SIM + "/control/{node}",
        "TELEMETRY_CPU_CONTROL_MODE": "rapl", "TELEMETRY_GPU_CONTROL": "http",
        "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT": SIM + "/control/{node}",
        "TELEMETRY_GPU_CONTROL_MODE": "rapl", "TELEMETRY_HTTP_TIMEOUT_SECONDS": "3",
        "JOULIE_TELEMETRY_SOURCE_TYPE": "http", "JOULIE_CONTROL_TYPE": "http",
        "JOULIE_CONTROL_MODE": "rapl",
    }
    settings = load_settings(experiment)
    assert settings.api_limit == (200.0, 400)
    assert settings.routing.cpu == Routing(
        source=SourceType.HTTP,
        source_http=HttpEndpoint(SIM + "/telemetry/{node}", 3.0),
        control=ControlType.HTTP,
        control_http=HttpEndpoint(SIM + "/control/{node}", 3.0),
        mode=ControlMode.RAPL,
    )
    assert settings.routing.gpu.control is ControlType.HTTP
    assert [n.split(" ")[0] for n in settings.notes] == [
        "TELEMETRY_GPU_CONTROL_MODE", "JOULIE_TELEMETRY_SOURCE_TYPE", "JOULIE_CONTROL_TYPE",
        "JOULIE_CONTROL_MODE",
    ]


@pytest.mark.parametrize(
    ("qps", "burst", "limit"),
    [
        (None, None, None),  # agentpool's default: no client-side limit
        ("200", "400", (200.0, 400)),
        ("20", None, (20.0, 100)),  # one set: the other is Joulie's default
        (None, "30", (50.0, 30)),
        ("0", "0", (5.0, 10)),  # client-go's defaults, as rest.Config reads 0
        ("-1", "10", None),  # client-go: a negative QPS disables the limit
        ("inf", "10", None),
        ("0.5", "1", (0.5, 1)),
    ],
)
def test_kube_client_qps_and_burst_mean_what_client_go_makes_of_them(
    qps: str | None, burst: str | None, limit: tuple[float, int] | None
) -> None:
    settings = load_settings({**POOL, "KUBE_CLIENT_QPS": qps, "KUBE_CLIENT_BURST": burst})
    assert settings.api_limit == limit
    assert settings.notes == ()


def test_error_table_covers_every_validated_variable() -> None:
    # Variables that are free text by nature (a path, a name) cannot be malformed (the
    # hardware catalog's content is checked at start: tests/hardware/test_catalog.py);
    # those whose every value runs (as Joulie's agent runs them) are in JOULIE instead.
    free_text = {
        "KUBECONFIG", "PROMETHEUS_MULTIPROC_DIR", "STATE_DIR", "SYSFS_ROOT", "HARDWARE_CATALOG_PATH"
    }
    covered = {variable for _, variable, _ in ERRORS} | {variable for _, variable, _, _ in JOULIE}
    assert {o.env for o in OPTIONS} - free_text <= covered


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
