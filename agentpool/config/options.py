"""Every option of the agent, declared once: variable, default, help, parser, field.

:data:`OPTIONS` is the one table. The CLI generates its flags from it, the
docs/configuration.md's table is checked against it, the settings'
dataclass defaults are its defaults run through its parsers, and
:func:`agentpool.config.settings.load_settings` is a loop over it; none of
them can drift apart. The enums are the values options choose from.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from agentpool.config import joulie
from agentpool.config.joulie import Fallback
from agentpool.config.parsers import (
    Parser,
    boolean,
    duration,
    hook,
    integer,
    log_level,
    metrics_addr,
    number,
    one_of,
    optional,
    path,
    rate,
    selector,
)
from agentpool.pool.assignment import Assignment


class AgentMode(enum.StrEnum):
    DAEMONSET = "daemonset"
    """One pod per real node; controls only ``NODE_NAME``."""
    POOL = "pool"
    """A StatefulSet replica hosting many logical node controllers (its shard)."""


class DvfsControllerKind(enum.StrEnum):
    ADAPTIVE = "adaptive"
    """Learns the node's power-vs-throttle slope and steps by what the error calls for."""
    JOULIE = "joulie"
    """Joulie's controller (controller/dvfs/joulie.py): EMA, trip count, cooldown, fixed
    steps."""


class JoulieApi(enum.StrEnum):
    AUTO = "auto"
    """Watch every Joulie kind served; each node follows its NodeTwin if one exists, else
    its NodePowerProfile (:mod:`agentpool.kube.selection`)."""
    NODETWIN = "nodetwin"
    """Joulie's current API: NodeTwin desired state, NodeHardware published, env routing."""
    PROFILES = "profiles"
    """The profile API: NodePowerProfile desired state, TelemetryProfile routing and status."""


class StaleAction(enum.StrEnum):
    RELAX = "relax"
    """Restore the host values found at start and release an HTTP throttle."""
    KEEP = "keep"
    """Keep enforcing the last desired state known."""


class Membership(enum.StrEnum):
    STATIC = "static"
    """A fixed pool: ``fnv32a(node) % POOL_SHARDS == POOL_SHARD_ID`` (docs/modes.md)."""
    LEASE = "lease"
    """An elastic pool: members hold Leases, nodes are handed over as it grows and shrinks."""


class LogFormat(enum.StrEnum):
    TEXT = "text"
    JSON = "json"



@dataclass(frozen=True)
class Option:
    """One setting as users see it, and where its parsed value goes."""

    env: str
    default: str | None
    help: str
    parse: Parser
    """Raw text -> value; options without a default are wrapped in :func:`optional`."""
    to: str | tuple[str, ...]
    """The settings field it fills: a :class:`~agentpool.config.settings.Settings` field,
    or ``group.field``, a field of one of its parts (``dvfs.step_pct``); a tuple spreads a
    parser's tuple over several fields; :data:`ROUTING`, composed from several options."""
    flag_value: bool = False
    """A boolean that may also be given as a bare flag (``--simulate-only``)."""
    joulie: Fallback | None = None
    """A variable Joulie's agent reads too: what is parsed instead of a value that agent
    runs with and :attr:`parse` refuses (:mod:`agentpool.config.joulie`)."""

    @property
    def flag(self) -> str:
        return "--" + self.env.lower().replace("_", "-")

    def value(self, raw: str | None) -> Any:
        """The parsed value of ``raw`` (None, missing or blank: the default, as Joulie's agent
        and a Helm value rendered empty both mean it)."""
        given = self.default if raw is None or not raw.strip() else raw
        return None if given is None else self.parse(self.env, given)


HEARTBEAT_HELP = (
    "supervisor: restart a worker silent this long; default 3 x RECONCILE_INTERVAL + 30s, "
    "or the node's longest legal tick (HTTP timeouts) + RECONCILE_INTERVAL + 30s if longer"
)
"""Unset, the limit is derived per node, in one place: supervisor.scope.heartbeat_limit."""


DIAGNOSTICS = "diagnostics:"
"""How the help of each diagnostics option begins: switches that exist to measure or
rule out a part of the agent, and a hook for tests and benchmarks. Production leaves
them at their defaults."""


ROUTING = "routing"
"""The TELEMETRY_* options are validated together into one routing
(:mod:`agentpool.config.env_routing`)."""


OPTIONS: tuple[Option, ...] = (
    Option("AGENT_MODE", "daemonset", "daemonset (one node, NODE_NAME) or pool (a shard of nodes)",
           one_of(AgentMode), "mode"),
    Option("NODE_NAME", None, "the node this pod runs on; required in daemonset mode",
           optional(), "node_name"),
    Option("RECONCILE_INTERVAL", "20s", "period of each node's reconcile tick (Go duration)",
           duration(positive=True), "reconcile_interval_s", joulie=joulie.reconcile_interval),
    Option("SIMULATE_ONLY", "false", "log intended actions, write nothing",
           boolean, "simulate_only", flag_value=True, joulie=joulie.simulate_only),
    Option("METRICS_ADDR", ":8080", "listen address of /metrics, /healthz and /readyz",
           metrics_addr, ("metrics_host", "metrics_port"), joulie=joulie.metrics_addr),
    Option("POOL_NODE_SELECTOR", "joulie.io/managed=true", "pool mode node label selector",
           selector, "pool_node_selector"),
    Option("POOL_SHARDS", "1", "total number of pool shards (StatefulSet replicas)",
           integer(minimum=0), "pool_shards"),
    Option("POOL_SHARD_ID", None, "this pod's shard; default: trailing integer of POD_NAME",
           optional(integer(minimum=0)), "pool_shard_id", joulie=joulie.pool_shard_id),
    Option("POD_NAME", None, "StatefulSet pod name (shard id fallback)",
           optional(), "pod_name"),
    Option("POOL_MEMBERSHIP", "static",
           "static (POOL_SHARDS, POOL_SHARD_ID) or lease (live Leases; follows the StatefulSet)",
           one_of(Membership), "elastic.membership"),
    Option("POOL_ASSIGNMENT", "rendezvous",
           "lease membership: modulo or rendezvous (fewest nodes move on a resize)",
           one_of(Assignment), "elastic.assignment"),
    Option("POOL_LEASE_DURATION", "15s",
           "lease membership: a pod counts as gone this long after its last renewal",
           duration(positive=True), "elastic.lease_duration_s"),
    Option("POOL_LEASE_RENEW", "5s",
           "lease membership: renewal period, at most half of POOL_LEASE_DURATION",
           duration(positive=True), "elastic.renew_s"),
    Option("POD_NAMESPACE", None, "lease membership: namespace of the Leases and the StatefulSet",
           optional(), "elastic.namespace"),
    Option("POOL_STATEFULSET", None,
           "lease membership: StatefulSet whose replicas are followed; default POD_NAME less "
           "ordinal",
           optional(), "elastic.statefulset"),
    Option("SYSFS_ROOT", "/host-sys", "host /sys mount; '{node}' is replaced by the node name",
           path, "sysfs_root"),
    Option("KUBECONFIG", None, "kubeconfig file; default: in-cluster configuration",
           optional(), "kubeconfig"),
    Option("HARDWARE_CATALOG_PATH", None,
           "Joulie's hardware catalog (YAML): NodeHardware model keys, GPU power ranges",
           optional(), "hardware_catalog_path"),
    Option("DVFS_CONTROLLER", "adaptive", "DVFS: adaptive (learns the slope) or joulie",
           one_of(DvfsControllerKind), "dvfs.controller"),
    Option("DVFS_TARGET_PCT", "96", "DVFS adaptive: power aimed at, in percent of the cap",
           number(lambda v: 50 <= v <= 100, "50 to 100 (percent)"), "dvfs.target_pct"),
    Option("DVFS_HOLD_BAND_PCT", "3.5", "DVFS adaptive: no change while within target +- this",
           number(lambda v: 0 < v <= 20, "greater than 0 and at most 20 (percent of the cap)"),
           "dvfs.hold_band_pct"),
    Option("DVFS_MAX_STEP_PCT", "50", "DVFS adaptive: largest throttle change per tick",
           integer(minimum=1, maximum=100), "dvfs.max_step_pct"),
    Option("DVFS_EMA_ALPHA", "0.30", "DVFS: EMA smoothing factor, 0 < alpha <= 1",
           number(lambda v: 0 < v <= 1, "0 < alpha <= 1"), "dvfs.ema_alpha",
           joulie=joulie.number),
    Option("DVFS_HIGH_MARGIN_W", "10", "DVFS: watts above the cap before counting 'above'",
           number(lambda v: v >= 0, "watts >= 0"), "dvfs.high_margin_w", joulie=joulie.number),
    Option("DVFS_LOW_MARGIN_W", "15", "DVFS: watts below the cap before counting 'below'",
           number(lambda v: v >= 0, "watts >= 0"), "dvfs.low_margin_w", joulie=joulie.number),
    Option("DVFS_TRIP_COUNT", "2", "DVFS: consecutive samples before acting",
           integer(minimum=1), "dvfs.trip_count", joulie=joulie.integer),
    Option("DVFS_COOLDOWN", "20s", "DVFS: hold time after an action (Go duration)",
           duration(positive=False), "dvfs.cooldown_s",
           joulie=joulie.not_negative("no cooldown after an action")),
    Option("DVFS_STEP_PCT", "10", "DVFS: throttle step in percent",
           integer(minimum=1, maximum=100), "dvfs.step_pct", joulie=joulie.integer),
    Option("DVFS_MIN_FREQ_KHZ", "1500000", "DVFS: scaling_max_freq given to throttled policies",
           integer(minimum=1), "dvfs.min_freq_khz", joulie=joulie.min_freq_khz),
    Option("RESTORE_ON_EXIT", "true", "restore the host values found at start on graceful stop",
           boolean, "restore_on_exit"),
    Option("SHUTDOWN_TIMEOUT", "20s", "supervisor: deadline for workers to stop before SIGKILL",
           duration(positive=True), "shutdown_timeout_s"),
    Option("HEARTBEAT_TIMEOUT", None, HEARTBEAT_HELP,
           optional(duration(positive=True)), "heartbeat_timeout_s"),
    Option("WATCH_TIMEOUT", "60s", "server-side timeout of each watch; reads time out 10s later",
           duration(positive=True), "watch_timeout_s"),
    Option("PROMETHEUS_MULTIPROC_DIR", None,
           "multiprocess metrics dir, wiped at start; default: a private temporary dir",
           optional(), "multiproc_dir"),
    Option("STATE_DIR", None,
           "journal of original host values, kept across restarts; "
           "default: a private temporary dir",
           optional(), "state_dir"),
    Option("LOG_FORMAT", "text", "text or json", one_of(LogFormat), "log_format"),
    Option("LOG_LEVEL", "info", "debug, info, warning or error", log_level, "log_level"),
    Option("JOULIE_API", "auto",
           "auto (both APIs; per node its NodeTwin, else its NodePowerProfile), nodetwin or "
           "profiles (that API only)",
           one_of(JoulieApi), "joulie_api"),
    Option("TELEMETRY_CPU_SOURCE", None, "CPU telemetry w/o TelemetryProfile: host, http, none",
           optional(), ROUTING),
    Option("TELEMETRY_CPU_HTTP_ENDPOINT", None, "CPU telemetry URL ('{node}' replaced)",
           optional(), ROUTING),
    Option("TELEMETRY_CPU_CONTROL", None, "CPU control when no TelemetryProfile: host, http, none",
           optional(), ROUTING),
    Option("TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT", None, "CPU control URL ('{node}' replaced)",
           optional(), ROUTING),
    Option("TELEMETRY_CPU_CONTROL_MODE", None, "CPU HTTP control mode: auto, rapl or dvfs",
           optional(), ROUTING),
    Option("TELEMETRY_GPU_CONTROL", None, "GPU control: host, http or none",
           optional(), ROUTING),
    Option("TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT", None, "GPU control URL ('{node}' replaced)",
           optional(), ROUTING),
    Option("TELEMETRY_HTTP_TIMEOUT_SECONDS", None, "timeout of those HTTP endpoints; default 2",
           optional(), ROUTING),
    Option("SPEC_READ_TIMEOUT", "5m", "act on SPEC_STALE_ACTION when desired state is unconfirmed",
           duration(positive=False), "spec_read_timeout_s",
           joulie=joulie.not_negative("caps are relaxed at the first failed read")),
    Option("SPEC_STALE_ACTION", "relax", "relax (restore host values) or keep",
           one_of(StaleAction), "spec_stale_action"),
    Option("HTTP_CA_BUNDLE", None, "PEM CAs of https endpoints; default: the system store",
           optional(), "http_auth.ca_bundle"),
    Option("HTTP_TOKEN_FILE", None, "bearer token file for https endpoints, re-read on change",
           optional(), "http_auth.token_file"),
    Option("HTTP_CLIENT_CERT", None, "client certificate (PEM) for https endpoints",
           optional(), "http_auth.client_cert"),
    Option("HTTP_CLIENT_KEY", None, "its private key (PEM); required with HTTP_CLIENT_CERT",
           optional(), "http_auth.client_key"),
    Option("EVENTS", "true", "record Kubernetes Events on the Node objects (aggregated)",
           boolean, "events"),
    Option("KUBE_CLIENT_QPS", None,
           "client-side limit of this pod's API requests per second; unset: none",
           optional(rate), "kube_qps", joulie=joulie.kube_qps),
    Option("KUBE_CLIENT_BURST", None,
           "API requests at once above KUBE_CLIENT_QPS; default 100 where a limit is set",
           optional(integer(minimum=0)), "kube_burst", joulie=joulie.kube_burst),
    Option("AGENTPOOL_PACK_CODE", "true",
           f"{DIAGNOSTICS} the fork server packs the code workers write onto few pages",
           boolean, "diagnostics.pack_code"),
    Option("AGENTPOOL_IMMORTALIZE", "true",
           f"{DIAGNOSTICS} the fork server makes its heap immortal (Python 3.12)",
           boolean, "diagnostics.immortalize"),
    Option("AGENTPOOL_FILL_HOLES", "true",
           f"{DIAGNOSTICS} the fork server fills its allocators' free memory before forking",
           boolean, "diagnostics.fill_holes"),
    Option("AGENTPOOL_PROCTITLE", "true",
           f"{DIAGNOSTICS} every process and thread names itself for ps and top",
           boolean, "diagnostics.proctitle"),
    Option("AGENTPOOL_WORKER_HOOK", None,
           f"{DIAGNOSTICS} module:function[=argument] whose result every worker calls first "
           "(faults, probes: tests and benchmarks only)",
           optional(hook), "diagnostics.worker_hook"),
)  # fmt: skip



def option(env: str) -> Option:
    """The table entry of a variable (the CLI's ``owner`` reuses its parser)."""
    return next(opt for opt in OPTIONS if opt.env == env)


def defaults() -> dict[str, str | None]:
    return {opt.env: opt.default for opt in OPTIONS}
