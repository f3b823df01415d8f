"""Every configuration error the settings refuse: the raw values, the variable the
error must name and the bad value it must name (tests/config, tests/test_cli.py)."""

from __future__ import annotations

POOL = {"AGENT_MODE": "pool"}

# Every configuration error: (raw values, variable named, bad value named).
ERRORS: list[tuple[dict[str, str], str, str]] = [
    ({"AGENT_MODE": "bogus"}, "AGENT_MODE", "bogus"),
    ({}, "NODE_NAME", ""),
    ({"NODE_NAME": "  "}, "NODE_NAME", "  "),
    ({**POOL, "METRICS_ADDR": ":70000"}, "METRICS_ADDR", ":70000"),
    ({**POOL, "METRICS_ADDR": ":-1"}, "METRICS_ADDR", ":-1"),
    ({**POOL, "POOL_NODE_SELECTOR": "tier in (a,b"}, "POOL_NODE_SELECTOR", "tier in (a,b"),
    ({**POOL, "POOL_NODE_SELECTOR": "=x"}, "POOL_NODE_SELECTOR", "=x"),
    ({**POOL, "POOL_SHARDS": "two"}, "POOL_SHARDS", "two"),
    ({**POOL, "POOL_SHARDS": "-1"}, "POOL_SHARDS", "-1"),
    ({**POOL, "POOL_SHARDS": "2", "POOL_SHARD_ID": "5"}, "POOL_SHARD_ID", "5"),
    ({**POOL, "POOL_SHARDS": "2", "POOL_SHARD_ID": "2"}, "POOL_SHARD_ID", "2"),
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
    ({**POOL, "DVFS_HIGH_MARGIN_W": "-1"}, "DVFS_HIGH_MARGIN_W", "-1"),
    ({**POOL, "DVFS_LOW_MARGIN_W": "-0.5"}, "DVFS_LOW_MARGIN_W", "-0.5"),
    ({**POOL, "DVFS_LOW_MARGIN_W": "inf"}, "DVFS_LOW_MARGIN_W", "inf"),
    ({**POOL, "DVFS_TRIP_COUNT": "0"}, "DVFS_TRIP_COUNT", "0"),
    ({**POOL, "DVFS_STEP_PCT": "0"}, "DVFS_STEP_PCT", "0"),
    ({**POOL, "DVFS_STEP_PCT": "101"}, "DVFS_STEP_PCT", "101"),
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
    # Joulie's agent runs with these too (docs/joulie-compatibility.md says why they stop
    # here, with POOL_SHARDS=two and the DVFS tunables out of range above): two pods would
    # control the same nodes, or a controller could not hold a cap.
    ({**POOL, "DVFS_TRIP_COUNT": "-1"}, "DVFS_TRIP_COUNT", "-1"),
    ({**POOL, "DVFS_EMA_ALPHA": "NaN"}, "DVFS_EMA_ALPHA", "NaN"),
    # A pool pod's CPU control without its endpoint or with a word of no meaning: there is
    # no host of its nodes to control instead, as Joulie's agent would (its own).
    ({**POOL, "TELEMETRY_CPU_CONTROL": "htpp"}, "TELEMETRY_CPU_CONTROL", "htpp"),
    ({**POOL, "METRICS_ADDR": ":no-such-service"}, "METRICS_ADDR", ":no-such-service"),
    ({**POOL, "KUBE_CLIENT_QPS": "nan"}, "KUBE_CLIENT_QPS", "nan"),
    # client-go's token bucket refuses every request with a negative burst.
    ({**POOL, "KUBE_CLIENT_BURST": "-1"}, "KUBE_CLIENT_BURST", "-1"),
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
    ({**POOL, "SPEC_STALE_ACTION": "panic"}, "SPEC_STALE_ACTION", "panic"),
    (
        {**POOL, "TELEMETRY_GPU_CONTROL": "http",
         "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT": "s/{node}"},
        "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT",
        "s/{node}",
    ),
    ({**POOL, "HTTP_CA_BUNDLE": "/nonexistent/ca.crt"}, "HTTP_CA_BUNDLE", "/nonexistent/ca.crt"),
    ({**POOL, "HTTP_TOKEN_FILE": "/nonexistent/token"}, "HTTP_TOKEN_FILE", "/nonexistent/token"),
    ({**POOL, "HTTP_CLIENT_KEY": "/tls.key"}, "HTTP_CLIENT_CERT", ""),
    ({**POOL, "HTTP_CLIENT_CERT": "/tls.crt"}, "HTTP_CLIENT_KEY", ""),
    ({**POOL, "AGENTPOOL_PACK_CODE": "0.5"}, "AGENTPOOL_PACK_CODE", "0.5"),
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
