"""Settings: one frozen object, built once from CLI flags and environment variables.

Every option is described once in :data:`OPTIONS` (variable, flag, default,
help); the CLI generates its flags from that table, so ``--help`` and the
parser cannot drift apart. Flags win over the environment. Anything that does
not parse or is out of range raises :class:`ConfigError` naming the variable,
and the CLI turns that into exit status 2 before anything starts.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from agentpool.backends.httpauth import HttpAuthSettings
from agentpool.backends.httpauth import validate as validate_http_auth
from agentpool.durations import parse_duration
from agentpool.errors import ConfigError
from agentpool.model import Routing
from agentpool.routing import GpuRouting, routing_from_env
from agentpool.sharding import Assignment, ordinal_from_pod_name

E = TypeVar("E", bound=enum.StrEnum)


class AgentMode(enum.StrEnum):
    DAEMONSET = "daemonset"
    """One pod per real node; controls only ``NODE_NAME``."""
    POOL = "pool"
    """A StatefulSet replica hosting many logical node controllers (its shard)."""


class DvfsControllerKind(enum.StrEnum):
    ADAPTIVE = "adaptive"
    """Learns the node's power-vs-throttle slope and steps by what the error calls for."""
    JOULIE = "joulie"
    """Joulie's controller (contract section 5): EMA, trip count, cooldown, fixed steps."""


class JoulieApi(enum.StrEnum):
    AUTO = "auto"
    """NodeTwin when ``nodetwins.joulie.io`` is served, else the profile API (at start)."""
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


@dataclass(frozen=True)
class Option:
    """One setting as users see it: environment variable, flag, default, help."""

    env: str
    default: str | None
    help: str
    flag_value: bool = False
    """A boolean that may also be given as a bare flag (``--simulate-only``)."""

    @property
    def flag(self) -> str:
        return "--" + self.env.lower().replace("_", "-")


OPTIONS: tuple[Option, ...] = (
    Option("AGENT_MODE", "daemonset", "daemonset (one node, NODE_NAME) or pool (a shard of nodes)"),
    Option("NODE_NAME", None, "the node this pod runs on; required in daemonset mode"),
    Option("RECONCILE_INTERVAL", "20s", "period of each node's reconcile tick (Go duration)"),
    Option("SIMULATE_ONLY", "false", "log intended actions, write nothing", flag_value=True),
    Option("METRICS_ADDR", ":8080", "listen address of /metrics, /healthz and /readyz"),
    Option("POOL_NODE_SELECTOR", "joulie.io/managed=true", "pool mode node label selector"),
    Option("POOL_SHARDS", "1", "total number of pool shards (StatefulSet replicas)"),
    Option("POOL_SHARD_ID", None, "this pod's shard; default: trailing integer of POD_NAME"),
    Option("POD_NAME", None, "StatefulSet pod name (shard id fallback)"),
    Option(
        "POOL_MEMBERSHIP", "static",
        "static (POOL_SHARDS, POOL_SHARD_ID) or lease (live Leases; follows the StatefulSet)",
    ),
    Option(
        "POOL_ASSIGNMENT", "rendezvous",
        "lease membership: modulo or rendezvous (fewest nodes move on a resize)",
    ),
    Option(
        "POOL_LEASE_DURATION", "15s",
        "lease membership: a pod counts as gone this long after its last renewal",
    ),
    Option(
        "POOL_LEASE_RENEW", "5s",
        "lease membership: renewal period, at most half of POOL_LEASE_DURATION",
    ),
    Option("POD_NAMESPACE", None, "lease membership: namespace of the Leases and the StatefulSet"),
    Option(
        "POOL_STATEFULSET", None,
        "lease membership: StatefulSet whose replicas are followed; default POD_NAME less ordinal",
    ),
    Option("SYSFS_ROOT", "/host-sys", "host /sys mount; '{node}' is replaced by the node name"),
    Option("KUBECONFIG", None, "kubeconfig file; default: in-cluster configuration"),
    Option("DVFS_CONTROLLER", "adaptive", "DVFS: adaptive (learns the slope) or joulie"),
    Option("DVFS_TARGET_PCT", "96", "DVFS adaptive: power aimed at, in percent of the cap"),
    Option("DVFS_HOLD_BAND_PCT", "3.5", "DVFS adaptive: no change while within target +- this"),
    Option("DVFS_MAX_STEP_PCT", "50", "DVFS adaptive: largest throttle change per tick"),
    Option("DVFS_EMA_ALPHA", "0.30", "DVFS: EMA smoothing factor, 0 < alpha <= 1"),
    Option("DVFS_HIGH_MARGIN_W", "10", "DVFS: watts above the cap before counting 'above'"),
    Option("DVFS_LOW_MARGIN_W", "15", "DVFS: watts below the cap before counting 'below'"),
    Option("DVFS_TRIP_COUNT", "2", "DVFS: consecutive samples before acting"),
    Option("DVFS_COOLDOWN", "20s", "DVFS: hold time after an action (Go duration)"),
    Option("DVFS_STEP_PCT", "10", "DVFS: throttle step in percent"),
    Option("DVFS_MIN_FREQ_KHZ", "1500000", "DVFS: scaling_max_freq given to throttled policies"),
    Option("RESTORE_ON_EXIT", "true", "restore the host values found at start on graceful stop"),
    Option("SHUTDOWN_TIMEOUT", "20s", "supervisor: deadline for workers to stop before SIGKILL"),
    Option(
        "HEARTBEAT_TIMEOUT",
        None,
        "supervisor: restart a worker silent this long; default 3 x RECONCILE_INTERVAL + 30s, "
        "or the node's longest legal tick (HTTP timeouts) + RECONCILE_INTERVAL + 30s if longer",
    ),
    Option("WATCH_TIMEOUT", "60s", "server-side timeout of each watch; reads time out 10s later"),
    Option(
        "PROMETHEUS_MULTIPROC_DIR",
        None,
        "multiprocess metrics dir, wiped at start; default: a private temporary dir",
    ),
    Option(
        "STATE_DIR",
        None,
        "journal of original host values, kept across restarts; default: a private temporary dir",
    ),
    Option("LOG_FORMAT", "text", "text or json"),
    Option("LOG_LEVEL", "info", "debug, info, warning or error"),
    Option("JOULIE_API", "auto", "auto (NodeTwin if served, else profiles), nodetwin or profiles"),
    Option("TELEMETRY_CPU_SOURCE", None, "CPU telemetry w/o TelemetryProfile: host, http, none"),
    Option("TELEMETRY_CPU_HTTP_ENDPOINT", None, "CPU telemetry URL ('{node}' replaced)"),
    Option("TELEMETRY_CPU_CONTROL", None, "CPU control when no TelemetryProfile: host, http, none"),
    Option("TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT", None, "CPU control URL ('{node}' replaced)"),
    Option("TELEMETRY_CPU_CONTROL_MODE", None, "CPU HTTP control mode: auto, rapl or dvfs"),
    Option("TELEMETRY_GPU_CONTROL", None, "GPU control: host, http or none"),
    Option("TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT", None, "GPU control URL ('{node}' replaced)"),
    Option("TELEMETRY_HTTP_TIMEOUT_SECONDS", None, "timeout of those HTTP endpoints; default 2"),
    Option("SPEC_READ_TIMEOUT", "5m", "act on SPEC_STALE_ACTION when desired state is unconfirmed"),
    Option("SPEC_STALE_ACTION", "relax", "relax (restore host values) or keep"),
    Option("HTTP_CA_BUNDLE", None, "PEM CAs of https endpoints; default: the system store"),
    Option("HTTP_TOKEN_FILE", None, "bearer token file for https endpoints, re-read on change"),
    Option("HTTP_CLIENT_CERT", None, "client certificate (PEM) for https endpoints"),
    Option("HTTP_CLIENT_KEY", None, "its private key (PEM); required with HTTP_CLIENT_CERT"),
)


@dataclass(frozen=True)
class DvfsSettings:
    """Tunables of the DVFS fallback controllers.

    ``controller`` picks one; the adaptive one reads ``target_pct``,
    ``hold_band_pct`` and ``max_step_pct`` (all relative, counted in ticks,
    so they need no rescaling with the interval), Joulie's reads the rest
    (contract section 5). ``min_freq_khz`` is for both (host cpufreq writes).
    """

    ema_alpha: float = 0.30
    """Weight of the newest sample in the exponential moving average."""
    high_margin_w: float = 10.0
    """``ema > cap + high_margin_w`` counts one sample "above"."""
    low_margin_w: float = 15.0
    """``ema < cap - low_margin_w`` counts one sample "below"."""
    trip_count: int = 2
    """Consecutive above/below samples needed before stepping the throttle."""
    cooldown_s: float = 20.0
    """After an action only hold, for this long, to let power settle."""
    step_pct: int = 10
    """Throttle change per action, in percent."""
    min_freq_khz: int = 1_500_000
    """The ``scaling_max_freq`` a throttled policy gets (clamped to its range)."""
    controller: DvfsControllerKind = DvfsControllerKind.ADAPTIVE
    """Which controller runs the DVFS fallback."""
    target_pct: float = 96.0
    """Adaptive: the power it steers to, in percent of the cap."""
    hold_band_pct: float = 3.5
    """Adaptive: no throttle change while power is within target +- this (percent of cap)."""
    max_step_pct: int = 50
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

    mode: AgentMode = AgentMode.DAEMONSET
    """Which nodes this pod controls."""
    node_name: str | None = None
    """The node of a daemonset pod."""
    reconcile_interval_s: float = 20.0
    """Period of each node's reconcile tick."""
    simulate_only: bool = False
    """Compute and log, write nothing to hosts or control endpoints."""
    metrics_host: str = ""
    """Host part of METRICS_ADDR ('' = all interfaces)."""
    metrics_port: int = 8080
    """Port of METRICS_ADDR (0 = pick a free one and log it)."""
    pool_node_selector: str = "joulie.io/managed=true"
    """Label selector of managed nodes in pool mode."""
    pool_shards: int = 1
    """Total shards; <= 1 means this pod owns every selected node."""
    pool_shard_id: int = 0
    """This pod's shard."""
    pod_name: str | None = None
    """StatefulSet pod name."""
    sysfs_root: str = "/host-sys"
    """Host sysfs mount; may contain '{node}'."""
    kubeconfig: str | None = None
    """Kubeconfig path; None means in-cluster configuration."""
    dvfs: DvfsSettings = field(default_factory=DvfsSettings)
    """DVFS fallback tunables."""
    restore_on_exit: bool = True
    """Restore changed host values on graceful stop."""
    shutdown_timeout_s: float = 20.0
    """How long the supervisor waits for workers to stop before SIGKILL."""
    heartbeat_timeout_s: float | None = None
    """A worker that reports nothing for this long is killed and restarted; None: derived
    per node by the supervisor (see ``agentpool.supervisor.scope.heartbeat_limit``)."""
    watch_timeout_s: float = 60.0
    """Server-side watch timeout; a silent watch is noticed 10 s after it."""
    multiproc_dir: str | None = None
    """Prometheus multiprocess directory; None = a private temporary one."""
    state_dir: str | None = None
    """Where workers journal the host values found before their first write; None = a
    private temporary one. Never wiped: a restarted agent restores the real originals."""
    log_format: LogFormat = LogFormat.TEXT
    """Log line format."""
    log_level: str = "info"
    """Logging level name."""
    joulie_api: JoulieApi = JoulieApi.AUTO
    """Which Joulie API generation to speak."""
    routing: Routing = field(default_factory=Routing)
    """CPU routing from the TELEMETRY_* variables, for nodes no TelemetryProfile targets."""
    gpu_routing: GpuRouting = field(default_factory=GpuRouting)
    """GPU control routing from the TELEMETRY_GPU_* variables."""
    spec_read_timeout_s: float = 300.0
    """Desired state unconfirmed from the API this long is stale."""
    spec_stale_action: StaleAction = StaleAction.RELAX
    """What a worker does with stale desired state."""
    http_auth: HttpAuthSettings = field(default_factory=HttpAuthSettings)
    """CA bundle, token file and client certificate of HTTP endpoints."""
    elastic: ElasticSettings = field(default_factory=ElasticSettings)
    """Pool membership (static by default) and the elastic pool's lease settings."""

    def sysfs_root_for(self, node: str) -> str:
        return self.sysfs_root.replace("{node}", node)


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _boolean(env: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(env, raw, "expected true or false")


def _integer(env: str, raw: str, minimum: int | None = None) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(env, raw, "expected an integer") from None
    if minimum is not None and value < minimum:
        raise ConfigError(env, raw, f"expected an integer >= {minimum}")
    return value


def _number(env: str, raw: str, check: Callable[[float], bool], accepted: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ConfigError(env, raw, f"expected a number, {accepted}") from None
    if not math.isfinite(value) or not check(value):
        raise ConfigError(env, raw, f"expected a number, {accepted}")
    return value


def _duration(env: str, raw: str, positive: bool) -> float:
    try:
        value = parse_duration(raw)
    except ValueError:
        raise ConfigError(env, raw, "expected a Go duration such as 500ms, 20s or 1m30s") from None
    if value < 0 or (positive and value == 0):
        raise ConfigError(env, raw, "expected a positive duration such as 500ms, 20s or 1m")
    return value


def _enum(env: str, raw: str, kind: type[E]) -> E:
    try:
        return kind(raw.strip().lower())
    except ValueError:
        accepted = ", ".join(m.value for m in kind)
        raise ConfigError(env, raw, f"expected one of {accepted}") from None


def _metrics_addr(env: str, raw: str) -> tuple[str, int]:
    host, sep, port = raw.strip().rpartition(":")
    if not sep:
        raise ConfigError(env, raw, "expected [host]:port, for example :8080 or 127.0.0.1:9090")
    host = host.strip("[]")
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(env, raw, "expected [host]:port with a numeric port") from None
    if not 0 <= number <= 65535:
        raise ConfigError(env, raw, "expected a port between 0 and 65535")
    return host, number


def _selector(env: str, raw: str) -> str:
    # Imported here to keep this module free of the selector grammar's details.
    from agentpool.labels import SelectorError, parse_selector

    try:
        parse_selector(raw)
    except SelectorError as exc:
        raise ConfigError(env, raw, f"expected a Kubernetes label selector ({exc})") from None
    return raw.strip()


HTTP_AUTH_VARIABLES = ("HTTP_CA_BUNDLE", "HTTP_TOKEN_FILE", "HTTP_CLIENT_CERT", "HTTP_CLIENT_KEY")
"""In the order of :class:`HttpAuthSettings`' fields."""


def defaults() -> dict[str, str | None]:
    return {opt.env: opt.default for opt in OPTIONS}


def load_settings(raw: Mapping[str, str | None]) -> Settings:
    """Validate raw string values (by variable name) into :class:`Settings`.

    ``raw`` holds what the user gave, flags already merged over the
    environment; a missing or None entry takes the option's default.
    """
    values = defaults()
    values.update({k: v for k, v in raw.items() if v is not None})

    def get(env: str) -> str:
        value = values.get(env)
        assert value is not None, env
        return value

    mode = _enum("AGENT_MODE", get("AGENT_MODE"), AgentMode)
    node_name = (values.get("NODE_NAME") or "").strip() or None
    if mode is AgentMode.DAEMONSET and node_name is None:
        raise ConfigError(
            "NODE_NAME", values.get("NODE_NAME") or "", "required in daemonset mode (spec.nodeName)"
        )
    shards = _integer("POOL_SHARDS", get("POOL_SHARDS"), minimum=0)
    pod_name = (values.get("POD_NAME") or "").strip() or None
    shard_raw = values.get("POOL_SHARD_ID")
    if shard_raw is not None and shard_raw.strip() != "":
        shard_id = _integer("POOL_SHARD_ID", shard_raw, minimum=0)
        shard_env, shard_value = "POOL_SHARD_ID", shard_raw
    elif pod_name is not None and ordinal_from_pod_name(pod_name) is not None:
        shard_id = ordinal_from_pod_name(pod_name) or 0
        shard_env, shard_value = "POD_NAME", pod_name
    elif mode is AgentMode.POOL and shards > 1:
        raise ConfigError(
            "POOL_SHARD_ID",
            "",
            f"required with POOL_SHARDS={shards}: set it, or POD_NAME ending in the ordinal",
        )
    else:
        shard_id, shard_env, shard_value = 0, "POOL_SHARD_ID", "0"
    elastic = _elastic(values, mode, pod_name)
    if mode is AgentMode.POOL and not elastic.lease and shard_id >= max(shards, 1):
        raise ConfigError(
            shard_env, shard_value, f"shard id {shard_id} must be below POOL_SHARDS={shards}"
        )
    host, port = _metrics_addr("METRICS_ADDR", get("METRICS_ADDR"))
    level = get("LOG_LEVEL").strip().lower()
    if level not in {"debug", "info", "warning", "error"}:
        raise ConfigError("LOG_LEVEL", get("LOG_LEVEL"), "expected debug, info, warning or error")
    dvfs = _dvfs(get)
    interval = _duration("RECONCILE_INTERVAL", get("RECONCILE_INTERVAL"), positive=True)
    raw_heartbeat = (values.get("HEARTBEAT_TIMEOUT") or "").strip()
    heartbeat = (
        _duration("HEARTBEAT_TIMEOUT", raw_heartbeat, positive=True) if raw_heartbeat else None
    )
    sysfs_root = get("SYSFS_ROOT").strip()
    if not sysfs_root:
        raise ConfigError("SYSFS_ROOT", sysfs_root, "expected a directory path")
    routing, gpu_routing = routing_from_env(values)
    http_auth = HttpAuthSettings(
        *((values.get(env) or "").strip() or None for env in HTTP_AUTH_VARIABLES)
    )
    validate_http_auth(http_auth)
    return Settings(
        http_auth=http_auth,
        joulie_api=_enum("JOULIE_API", get("JOULIE_API"), JoulieApi),
        routing=routing,
        gpu_routing=gpu_routing,
        spec_read_timeout_s=_duration("SPEC_READ_TIMEOUT", get("SPEC_READ_TIMEOUT"), positive=True),
        spec_stale_action=_enum("SPEC_STALE_ACTION", get("SPEC_STALE_ACTION"), StaleAction),
        mode=mode,
        node_name=node_name,
        reconcile_interval_s=interval,
        simulate_only=_boolean("SIMULATE_ONLY", get("SIMULATE_ONLY")),
        metrics_host=host,
        metrics_port=port,
        pool_node_selector=_selector("POOL_NODE_SELECTOR", get("POOL_NODE_SELECTOR")),
        pool_shards=shards,
        pool_shard_id=shard_id,
        pod_name=pod_name,
        sysfs_root=sysfs_root,
        kubeconfig=(values.get("KUBECONFIG") or "").strip() or None,
        dvfs=dvfs,
        restore_on_exit=_boolean("RESTORE_ON_EXIT", get("RESTORE_ON_EXIT")),
        shutdown_timeout_s=_duration("SHUTDOWN_TIMEOUT", get("SHUTDOWN_TIMEOUT"), positive=True),
        heartbeat_timeout_s=heartbeat,
        watch_timeout_s=_duration("WATCH_TIMEOUT", get("WATCH_TIMEOUT"), positive=True),
        multiproc_dir=(values.get("PROMETHEUS_MULTIPROC_DIR") or "").strip() or None,
        state_dir=(values.get("STATE_DIR") or "").strip() or None,
        log_format=_enum("LOG_FORMAT", get("LOG_FORMAT"), LogFormat),
        log_level=level,
        elastic=elastic,
    )


def _elastic(
    values: Mapping[str, str | None], mode: AgentMode, pod_name: str | None
) -> ElasticSettings:
    """The elastic-pool settings; in lease mode POD_NAME, the namespace and a StatefulSet."""
    def get(env: str) -> str:
        return values.get(env) or ""

    membership = _enum("POOL_MEMBERSHIP", get("POOL_MEMBERSHIP"), Membership)
    duration = _duration("POOL_LEASE_DURATION", get("POOL_LEASE_DURATION"), positive=True)
    renew = _duration("POOL_LEASE_RENEW", get("POOL_LEASE_RENEW"), positive=True)
    if renew * 2 > duration:
        raise ConfigError(
            "POOL_LEASE_RENEW", get("POOL_LEASE_RENEW"),
            f"expected at most half of POOL_LEASE_DURATION={get('POOL_LEASE_DURATION')}",
        )
    elastic = ElasticSettings(
        membership=membership,
        assignment=_enum("POOL_ASSIGNMENT", get("POOL_ASSIGNMENT"), Assignment),
        lease_duration_s=duration,
        renew_s=renew,
        namespace=get("POD_NAMESPACE").strip() or None,
        statefulset=get("POOL_STATEFULSET").strip() or None,
    )
    if membership is not Membership.LEASE or mode is not AgentMode.POOL:
        return elastic
    if pod_name is None:
        raise ConfigError("POD_NAME", get("POD_NAME"), "required with POOL_MEMBERSHIP=lease "
                          "(the Lease is named after the pod)")
    if elastic.namespace is None:
        raise ConfigError("POD_NAMESPACE", get("POD_NAMESPACE"),
                          "required with POOL_MEMBERSHIP=lease (metadata.namespace)")
    if elastic.statefulset is None:
        ordinal = ordinal_from_pod_name(pod_name)
        if ordinal is None or not pod_name.endswith(f"-{ordinal}"):
            raise ConfigError("POOL_STATEFULSET", get("POOL_STATEFULSET"),
                              f"required with POOL_MEMBERSHIP=lease when POD_NAME={pod_name!r} "
                              "does not end in -<ordinal>")
        return dataclasses.replace(elastic, statefulset=pod_name[: -len(f"-{ordinal}")])
    return elastic


def _step_pct(raw: str, env: str = "DVFS_STEP_PCT") -> int:
    value = _integer(env, raw, minimum=1)
    if value > 100:
        raise ConfigError(env, raw, "expected an integer from 1 to 100")
    return value


def _dvfs(get: Callable[[str], str]) -> DvfsSettings:
    """Both DVFS controllers' settings (see :class:`DvfsSettings`)."""
    target = _number(
        "DVFS_TARGET_PCT", get("DVFS_TARGET_PCT"), lambda v: 50 <= v <= 100, "50 to 100 (percent)"
    )
    band = _number(
        "DVFS_HOLD_BAND_PCT",
        get("DVFS_HOLD_BAND_PCT"),
        lambda v: 0 < v <= 20,
        "greater than 0 and at most 20 (percent of the cap)",
    )
    if target + band > 110:
        # Holding still while this far over the cap would not be enforcing it.
        raise ConfigError(
            "DVFS_HOLD_BAND_PCT",
            get("DVFS_HOLD_BAND_PCT"),
            f"DVFS_TARGET_PCT + DVFS_HOLD_BAND_PCT must be at most 110 (target is {target:g})",
        )
    return DvfsSettings(
        controller=_enum("DVFS_CONTROLLER", get("DVFS_CONTROLLER"), DvfsControllerKind),
        target_pct=target,
        hold_band_pct=band,
        max_step_pct=_step_pct(get("DVFS_MAX_STEP_PCT"), "DVFS_MAX_STEP_PCT"),
        ema_alpha=_number(
            "DVFS_EMA_ALPHA", get("DVFS_EMA_ALPHA"), lambda v: 0 < v <= 1, "0 < alpha <= 1"
        ),
        high_margin_w=_number(
            "DVFS_HIGH_MARGIN_W", get("DVFS_HIGH_MARGIN_W"), lambda v: v >= 0, "watts >= 0"
        ),
        low_margin_w=_number(
            "DVFS_LOW_MARGIN_W", get("DVFS_LOW_MARGIN_W"), lambda v: v >= 0, "watts >= 0"
        ),
        trip_count=_integer("DVFS_TRIP_COUNT", get("DVFS_TRIP_COUNT"), minimum=1),
        cooldown_s=_duration("DVFS_COOLDOWN", get("DVFS_COOLDOWN"), positive=False),
        step_pct=_step_pct(get("DVFS_STEP_PCT")),
        min_freq_khz=_integer("DVFS_MIN_FREQ_KHZ", get("DVFS_MIN_FREQ_KHZ"), minimum=1),
    )
