"""Settings: one frozen object, built once from CLI flags and environment variables.

Every option is declared once, in :data:`OPTIONS`: its variable, flag,
default, help, parser and the :class:`Settings` field it fills. The CLI
generates its flags from that table, the dataclass defaults are the table's
defaults run through the table's parsers, and :func:`load_settings` is the
same loop over the table, so none of them can drift apart. Flags win over the
environment. Anything that does not parse or is out of range raises
:class:`ConfigError` naming the variable, and the CLI turns that into exit
status 2 before anything starts.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agentpool.backends.httpauth import HttpAuthSettings
from agentpool.backends.httpauth import validate as validate_http_auth
from agentpool.config.env_routing import GpuRouting, routing_from_env
from agentpool.durations import parse_duration
from agentpool.errors import ConfigError
from agentpool.pool.assignment import Assignment, ordinal_from_pod_name
from agentpool.spec.values import Routing

E = TypeVar("E", bound=enum.StrEnum)

Parser = Callable[[str, str], Any]
"""``(variable, raw text) -> value``; raises :class:`ConfigError` naming the variable."""


class AgentMode(enum.StrEnum):
    DAEMONSET = "daemonset"
    """One pod per real node; controls only ``NODE_NAME``."""
    POOL = "pool"
    """A StatefulSet replica hosting many logical node controllers (its shard)."""


class DvfsControllerKind(enum.StrEnum):
    ADAPTIVE = "adaptive"
    """Learns the node's power-vs-throttle slope and steps by what the error calls for."""
    JOULIE = "joulie"
    """Joulie's controller (agentpool/controller/dvfs/joulie.py): EMA, trip count, cooldown, fixed
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
    """A fixed pool: ``fnv32a(node) % POOL_SHARDS == POOL_SHARD_ID`` (the contract)."""
    LEASE = "lease"
    """An elastic pool: members hold Leases, nodes are handed over as it grows and shrinks."""


class LogFormat(enum.StrEnum):
    TEXT = "text"
    JSON = "json"


# --- parsers: each takes the variable's name (for the error) and the raw text ---------

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def boolean(env: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(env, raw, "expected true or false")


def integer(minimum: int, maximum: int | None = None) -> Parser:
    def parse(env: str, raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ConfigError(env, raw, "expected an integer") from None
        if value < minimum or (maximum is not None and value > maximum):
            accepted = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            raise ConfigError(env, raw, f"expected an integer {accepted}")
        return value

    return parse


def number(check: Callable[[float], bool], accepted: str) -> Parser:
    def parse(env: str, raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ConfigError(env, raw, f"expected a number, {accepted}") from None
        if not math.isfinite(value) or not check(value):
            raise ConfigError(env, raw, f"expected a number, {accepted}")
        return value

    return parse


def duration(positive: bool) -> Parser:
    """Seconds in a Go duration; ``positive`` refuses 0 as well as negative values."""

    def parse(env: str, raw: str) -> float:
        try:
            value = parse_duration(raw)
        except ValueError:
            raise ConfigError(
                env, raw, "expected a Go duration such as 500ms, 20s or 1m30s"
            ) from None
        if value < 0 or (positive and value == 0):
            raise ConfigError(env, raw, "expected a positive duration such as 500ms, 20s or 1m")
        return value

    return parse


def one_of(kind: type[E]) -> Parser:
    def parse(env: str, raw: str) -> E:
        try:
            return kind(raw.strip().lower())
        except ValueError:
            accepted = ", ".join(m.value for m in kind)
            raise ConfigError(env, raw, f"expected one of {accepted}") from None

    return parse


def optional(parser: Parser | None = None) -> Parser:
    """A setting without a default: blank means unset (None), anything else is parsed."""

    def parse(env: str, raw: str) -> Any:
        text = raw.strip()
        if not text:
            return None
        return parser(env, raw) if parser is not None else text

    return parse


def path(env: str, raw: str) -> str:
    """A required path: blank is refused."""
    value = raw.strip()
    if not value:
        raise ConfigError(env, value, "expected a directory path")
    return value


def metrics_addr(env: str, raw: str) -> tuple[str, int]:
    host, sep, port = raw.strip().rpartition(":")
    if not sep:
        raise ConfigError(env, raw, "expected [host]:port, for example :8080 or 127.0.0.1:9090")
    host = host.strip("[]")
    try:
        value = int(port)
    except ValueError:
        raise ConfigError(env, raw, "expected [host]:port with a numeric port") from None
    if not 0 <= value <= 65535:
        raise ConfigError(env, raw, "expected a port between 0 and 65535")
    return host, value


def selector(env: str, raw: str) -> str:
    # Imported here to keep this module free of the selector grammar's details.
    from agentpool.spec.selectors import SelectorError, parse_selector

    try:
        parse_selector(raw)
    except SelectorError as exc:
        raise ConfigError(env, raw, f"expected a Kubernetes label selector ({exc})") from None
    return raw.strip()


def log_level(env: str, raw: str) -> str:
    level = raw.strip().lower()
    if level not in {"debug", "info", "warning", "error"}:
        raise ConfigError(env, raw, "expected debug, info, warning or error")
    return level


# --- the table -------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One setting as users see it, and where its parsed value goes."""

    env: str
    default: str | None
    help: str
    parse: Parser
    """Raw text -> value; options without a default are wrapped in :func:`optional`."""
    to: str | tuple[str, ...]
    """The :class:`Settings` field it fills (``dvfs.x``: a :class:`DvfsSettings` field);
    a tuple spreads a parser's tuple over several fields."""
    flag_value: bool = False
    """A boolean that may also be given as a bare flag (``--simulate-only``)."""

    @property
    def flag(self) -> str:
        return "--" + self.env.lower().replace("_", "-")

    def value(self, raw: str | None) -> Any:
        """The parsed value of ``raw`` (None or missing: the default)."""
        given = self.default if raw is None else raw
        return None if given is None else self.parse(self.env, given)


HEARTBEAT_HELP = (
    "supervisor: restart a worker silent this long; default 3 x RECONCILE_INTERVAL + 30s, "
    "or the node's longest legal tick (HTTP timeouts) + RECONCILE_INTERVAL + 30s if longer"
)
"""Unset, the limit is derived per node, in one place: supervisor.scope.heartbeat_limit."""


ROUTING = "routing"
"""The TELEMETRY_* options fill ``routing`` and ``gpu_routing`` together (routing.py)."""
HTTP_AUTH = "http_auth"
"""The HTTP_* credential options fill one :class:`HttpAuthSettings` together."""
ELASTIC = "elastic"
"""The elastic-pool options fill one :class:`ElasticSettings` together."""


OPTIONS: tuple[Option, ...] = (
    Option("AGENT_MODE", "daemonset", "daemonset (one node, NODE_NAME) or pool (a shard of nodes)",
           one_of(AgentMode), "mode"),
    Option("NODE_NAME", None, "the node this pod runs on; required in daemonset mode",
           optional(), "node_name"),
    Option("RECONCILE_INTERVAL", "20s", "period of each node's reconcile tick (Go duration)",
           duration(positive=True), "reconcile_interval_s"),
    Option("SIMULATE_ONLY", "false", "log intended actions, write nothing",
           boolean, "simulate_only", flag_value=True),
    Option("METRICS_ADDR", ":8080", "listen address of /metrics, /healthz and /readyz",
           metrics_addr, ("metrics_host", "metrics_port")),
    Option("POOL_NODE_SELECTOR", "joulie.io/managed=true", "pool mode node label selector",
           selector, "pool_node_selector"),
    Option("POOL_SHARDS", "1", "total number of pool shards (StatefulSet replicas)",
           integer(minimum=0), "pool_shards"),
    Option("POOL_SHARD_ID", None, "this pod's shard; default: trailing integer of POD_NAME",
           optional(integer(minimum=0)), "pool_shard_id"),
    Option("POD_NAME", None, "StatefulSet pod name (shard id fallback)",
           optional(), "pod_name"),
    Option("POOL_MEMBERSHIP", "static",
           "static (POOL_SHARDS, POOL_SHARD_ID) or lease (live Leases; follows the StatefulSet)",
           one_of(Membership), ELASTIC),
    Option("POOL_ASSIGNMENT", "rendezvous",
           "lease membership: modulo or rendezvous (fewest nodes move on a resize)",
           one_of(Assignment), ELASTIC),
    Option("POOL_LEASE_DURATION", "15s",
           "lease membership: a pod counts as gone this long after its last renewal",
           duration(positive=True), ELASTIC),
    Option("POOL_LEASE_RENEW", "5s",
           "lease membership: renewal period, at most half of POOL_LEASE_DURATION",
           duration(positive=True), ELASTIC),
    Option("POD_NAMESPACE", None, "lease membership: namespace of the Leases and the StatefulSet",
           optional(), ELASTIC),
    Option("POOL_STATEFULSET", None,
           "lease membership: StatefulSet whose replicas are followed; default POD_NAME less "
           "ordinal",
           optional(), ELASTIC),
    Option("SYSFS_ROOT", "/host-sys", "host /sys mount; '{node}' is replaced by the node name",
           path, "sysfs_root"),
    Option("KUBECONFIG", None, "kubeconfig file; default: in-cluster configuration",
           optional(), "kubeconfig"),
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
           number(lambda v: 0 < v <= 1, "0 < alpha <= 1"), "dvfs.ema_alpha"),
    Option("DVFS_HIGH_MARGIN_W", "10", "DVFS: watts above the cap before counting 'above'",
           number(lambda v: v >= 0, "watts >= 0"), "dvfs.high_margin_w"),
    Option("DVFS_LOW_MARGIN_W", "15", "DVFS: watts below the cap before counting 'below'",
           number(lambda v: v >= 0, "watts >= 0"), "dvfs.low_margin_w"),
    Option("DVFS_TRIP_COUNT", "2", "DVFS: consecutive samples before acting",
           integer(minimum=1), "dvfs.trip_count"),
    Option("DVFS_COOLDOWN", "20s", "DVFS: hold time after an action (Go duration)",
           duration(positive=False), "dvfs.cooldown_s"),
    Option("DVFS_STEP_PCT", "10", "DVFS: throttle step in percent",
           integer(minimum=1, maximum=100), "dvfs.step_pct"),
    Option("DVFS_MIN_FREQ_KHZ", "1500000", "DVFS: scaling_max_freq given to throttled policies",
           integer(minimum=1), "dvfs.min_freq_khz"),
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
           duration(positive=True), "spec_read_timeout_s"),
    Option("SPEC_STALE_ACTION", "relax", "relax (restore host values) or keep",
           one_of(StaleAction), "spec_stale_action"),
    Option("HTTP_CA_BUNDLE", None, "PEM CAs of https endpoints; default: the system store",
           optional(), HTTP_AUTH),
    Option("HTTP_TOKEN_FILE", None, "bearer token file for https endpoints, re-read on change",
           optional(), HTTP_AUTH),
    Option("HTTP_CLIENT_CERT", None, "client certificate (PEM) for https endpoints",
           optional(), HTTP_AUTH),
    Option("HTTP_CLIENT_KEY", None, "its private key (PEM); required with HTTP_CLIENT_CERT",
           optional(), HTTP_AUTH),
)  # fmt: skip


HTTP_AUTH_VARIABLES = tuple(opt.env for opt in OPTIONS if opt.to == HTTP_AUTH)
"""In table order, which is the order of :class:`HttpAuthSettings`' fields."""


def option(env: str) -> Option:
    """The table entry of a variable (the CLI's ``owner`` reuses its parser)."""
    return next(opt for opt in OPTIONS if opt.env == env)


def _fields(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parsed values by variable -> (Settings fields, DvfsSettings fields)."""
    top: dict[str, Any] = {}
    dvfs: dict[str, Any] = {}
    for opt in OPTIONS:
        if opt.to in (ROUTING, HTTP_AUTH, ELASTIC):
            continue  # composed from several options by load_settings
        value = values[opt.env]
        targets = opt.to if isinstance(opt.to, tuple) else (opt.to,)
        parts = value if isinstance(opt.to, tuple) else (value,)
        for target, part in zip(targets, parts, strict=True):
            group, _, name = target.rpartition(".")
            (dvfs if group == "dvfs" else top)[name] = part
    return top, dvfs


# The dataclass defaults are the table's defaults, parsed: one source for both.
_TOP, _DVFS = _fields({opt.env: opt.value(None) for opt in OPTIONS})


@dataclass(frozen=True)
class DvfsSettings:
    """Tunables of the DVFS fallback controllers (README, "Configuration").

    ``controller`` picks one; the adaptive one reads ``target_pct``,
    ``hold_band_pct`` and ``max_step_pct`` (all relative, counted in ticks,
    so they need no rescaling with the interval), Joulie's reads the rest.
    ``min_freq_khz`` is for both (host cpufreq writes).
    """

    ema_alpha: float = _DVFS["ema_alpha"]
    """Weight of the newest sample in the exponential moving average."""
    high_margin_w: float = _DVFS["high_margin_w"]
    """``ema > cap + high_margin_w`` counts one sample "above"."""
    low_margin_w: float = _DVFS["low_margin_w"]
    """``ema < cap - low_margin_w`` counts one sample "below"."""
    trip_count: int = _DVFS["trip_count"]
    """Consecutive above/below samples needed before stepping the throttle."""
    cooldown_s: float = _DVFS["cooldown_s"]
    """After an action only hold, for this long, to let power settle."""
    step_pct: int = _DVFS["step_pct"]
    """Throttle change per action, in percent."""
    min_freq_khz: int = _DVFS["min_freq_khz"]
    """The ``scaling_max_freq`` a throttled policy gets (clamped to its range)."""
    controller: DvfsControllerKind = _DVFS["controller"]
    """Which controller runs the DVFS fallback."""
    target_pct: float = _DVFS["target_pct"]
    """Adaptive: the power it steers to, in percent of the cap."""
    hold_band_pct: float = _DVFS["hold_band_pct"]
    """Adaptive: no throttle change while power is within target +- this (percent of cap)."""
    max_step_pct: int = _DVFS["max_step_pct"]
    """Adaptive: the largest throttle change one tick may make, in percent."""


@dataclass(frozen=True)
class ElasticSettings:
    """How an elastic pool finds its members and shares nodes (README: elastic pool)."""

    membership: Membership = Membership.STATIC
    """Static pools ignore everything below."""
    assignment: Assignment = Assignment.RENDEZVOUS
    """How nodes map to the live members."""
    lease_duration_s: float = 15.0
    """``leaseDurationSeconds`` of this pod's Lease."""
    renew_s: float = 5.0
    """Renewal period; a pod that could not renew for duration - renew stops its workers."""
    namespace: str | None = None
    """Namespace of the Leases and of the StatefulSet."""
    statefulset: str | None = None
    """The StatefulSet whose ``spec.replicas`` is followed."""

    @property
    def lease(self) -> bool:
        return self.membership is Membership.LEASE


@dataclass(frozen=True)
class Settings:
    """Everything the agent is configured with, validated."""

    mode: AgentMode = _TOP["mode"]
    """Which nodes this pod controls."""
    node_name: str | None = _TOP["node_name"]
    """The node of a daemonset pod."""
    reconcile_interval_s: float = _TOP["reconcile_interval_s"]
    """Period of each node's reconcile tick."""
    simulate_only: bool = _TOP["simulate_only"]
    """Compute and log, write nothing to hosts or control endpoints."""
    metrics_host: str = _TOP["metrics_host"]
    """Host part of METRICS_ADDR ('' = all interfaces)."""
    metrics_port: int = _TOP["metrics_port"]
    """Port of METRICS_ADDR (0 = pick a free one and log it)."""
    pool_node_selector: str = _TOP["pool_node_selector"]
    """Label selector of managed nodes in pool mode."""
    pool_shards: int = _TOP["pool_shards"]
    """Total shards; <= 1 means this pod owns every selected node."""
    pool_shard_id: int = 0
    """This pod's shard (derived: see :func:`_shard_id`)."""
    pod_name: str | None = _TOP["pod_name"]
    """StatefulSet pod name."""
    sysfs_root: str = _TOP["sysfs_root"]
    """Host sysfs mount; may contain '{node}'."""
    kubeconfig: str | None = _TOP["kubeconfig"]
    """Kubeconfig path; None means in-cluster configuration."""
    dvfs: DvfsSettings = field(default_factory=DvfsSettings)
    """DVFS fallback tunables."""
    restore_on_exit: bool = _TOP["restore_on_exit"]
    """Restore changed host values on graceful stop."""
    shutdown_timeout_s: float = _TOP["shutdown_timeout_s"]
    """How long the supervisor waits for workers to stop before SIGKILL."""
    heartbeat_timeout_s: float | None = _TOP["heartbeat_timeout_s"]
    """A worker that reports nothing for this long is killed and restarted; None: derived
    per node by the supervisor (see ``agentpool.supervisor.scope.heartbeat_limit``)."""
    watch_timeout_s: float = _TOP["watch_timeout_s"]
    """Server-side watch timeout; a silent watch is noticed 10 s after it."""
    multiproc_dir: str | None = _TOP["multiproc_dir"]
    """Prometheus multiprocess directory; None = a private temporary one."""
    state_dir: str | None = _TOP["state_dir"]
    """Where workers journal the host values found before their first write; None = a
    private temporary one. Never wiped: a restarted agent restores the real originals."""
    log_format: LogFormat = _TOP["log_format"]
    """Log line format."""
    log_level: str = _TOP["log_level"]
    """Logging level name."""
    joulie_api: JoulieApi = _TOP["joulie_api"]
    """Which Joulie API generation to speak."""
    routing: Routing = field(default_factory=Routing)
    """CPU routing from the TELEMETRY_* variables, for nodes no TelemetryProfile targets."""
    gpu_routing: GpuRouting = field(default_factory=GpuRouting)
    """GPU control routing from the TELEMETRY_GPU_* variables."""
    spec_read_timeout_s: float = _TOP["spec_read_timeout_s"]
    """Desired state unconfirmed from the API this long is stale."""
    spec_stale_action: StaleAction = _TOP["spec_stale_action"]
    """What a worker does with stale desired state."""
    http_auth: HttpAuthSettings = field(default_factory=HttpAuthSettings)
    """CA bundle, token file and client certificate of HTTP endpoints."""
    elastic: ElasticSettings = field(default_factory=ElasticSettings)
    """Pool membership (static by default) and the elastic pool's lease settings."""

    def sysfs_root_for(self, node: str) -> str:
        return self.sysfs_root.replace("{node}", node)


def defaults() -> dict[str, str | None]:
    return {opt.env: opt.default for opt in OPTIONS}


def load_settings(raw: Mapping[str, str | None]) -> Settings:
    """Validate raw string values (by variable name) into :class:`Settings`.

    ``raw`` holds what the user gave, flags already merged over the
    environment; a missing or None entry takes the option's default.
    Options are parsed in table order, then the rules that join several
    options run.
    """
    values = {opt.env: opt.value(raw.get(opt.env)) for opt in OPTIONS}
    mode: AgentMode = values["AGENT_MODE"]
    if mode is AgentMode.DAEMONSET and values["NODE_NAME"] is None:
        raise ConfigError(
            "NODE_NAME", raw.get("NODE_NAME") or "", "required in daemonset mode (spec.nodeName)"
        )
    values["POOL_SHARD_ID"] = _shard_id(mode, values, raw)
    if values["DVFS_TARGET_PCT"] + values["DVFS_HOLD_BAND_PCT"] > 110:
        # Holding still while this far over the cap would not be enforcing it.
        raise ConfigError(
            "DVFS_HOLD_BAND_PCT",
            raw.get("DVFS_HOLD_BAND_PCT") or option("DVFS_HOLD_BAND_PCT").default,
            "DVFS_TARGET_PCT + DVFS_HOLD_BAND_PCT must be at most 110 "
            f"(target is {values['DVFS_TARGET_PCT']:g})",
        )
    routing, gpu_routing = routing_from_env(values)
    http_auth = HttpAuthSettings(*(values[env] for env in HTTP_AUTH_VARIABLES))
    validate_http_auth(http_auth)
    top, dvfs = _fields(values)
    return Settings(
        **top, dvfs=DvfsSettings(**dvfs), routing=routing, gpu_routing=gpu_routing,
        http_auth=http_auth, elastic=_elastic(values, raw, mode),
    )


def _elastic(
    values: Mapping[str, Any], raw: Mapping[str, str | None], mode: AgentMode
) -> ElasticSettings:
    """The elastic-pool settings; in lease mode POD_NAME, the namespace and a StatefulSet."""
    elastic = ElasticSettings(
        membership=values["POOL_MEMBERSHIP"],
        assignment=values["POOL_ASSIGNMENT"],
        lease_duration_s=values["POOL_LEASE_DURATION"],
        renew_s=values["POOL_LEASE_RENEW"],
        namespace=values["POD_NAMESPACE"],
        statefulset=values["POOL_STATEFULSET"],
    )
    if elastic.renew_s * 2 > elastic.lease_duration_s:
        raise ConfigError(
            "POOL_LEASE_RENEW", raw.get("POOL_LEASE_RENEW") or option("POOL_LEASE_RENEW").default,
            "expected at most half of POOL_LEASE_DURATION="
            f"{raw.get('POOL_LEASE_DURATION') or option('POOL_LEASE_DURATION').default}",
        )
    if not elastic.lease or mode is not AgentMode.POOL:
        return elastic
    pod_name: str | None = values["POD_NAME"]
    if pod_name is None:
        raise ConfigError("POD_NAME", raw.get("POD_NAME") or "", "required with "
                          "POOL_MEMBERSHIP=lease (the Lease is named after the pod)")
    if elastic.namespace is None:
        raise ConfigError("POD_NAMESPACE", raw.get("POD_NAMESPACE") or "",
                          "required with POOL_MEMBERSHIP=lease (metadata.namespace)")
    if elastic.statefulset is None:
        ordinal = ordinal_from_pod_name(pod_name)
        if ordinal is None or not pod_name.endswith(f"-{ordinal}"):
            raise ConfigError("POOL_STATEFULSET", raw.get("POOL_STATEFULSET") or "",
                              f"required with POOL_MEMBERSHIP=lease when POD_NAME={pod_name!r} "
                              "does not end in -<ordinal>")
        return dataclasses.replace(elastic, statefulset=pod_name[: -len(f"-{ordinal}")])
    return elastic


def _shard_id(mode: AgentMode, values: Mapping[str, Any], raw: Mapping[str, str | None]) -> int:
    """POOL_SHARD_ID, else the ordinal of POD_NAME, checked against POOL_SHARDS in pool mode."""
    shards: int = values["POOL_SHARDS"]
    pod_name: str | None = values["POD_NAME"]
    ordinal = ordinal_from_pod_name(pod_name) if pod_name is not None else None
    if values["POOL_SHARD_ID"] is not None:
        shard_id: int = values["POOL_SHARD_ID"]
        env, given = "POOL_SHARD_ID", raw.get("POOL_SHARD_ID")
    elif ordinal is not None:
        shard_id, env, given = ordinal, "POD_NAME", pod_name
    elif mode is AgentMode.POOL and shards > 1:
        raise ConfigError(
            "POOL_SHARD_ID",
            "",
            f"required with POOL_SHARDS={shards}: set it, or POD_NAME ending in the ordinal",
        )
    else:
        return 0
    lease = values["POOL_MEMBERSHIP"] is Membership.LEASE
    if mode is AgentMode.POOL and not lease and shard_id >= max(shards, 1):
        raise ConfigError(env, given, f"shard id {shard_id} must be below POOL_SHARDS={shards}")
    return shard_id
