"""Settings: frozen objects built once from CLI flags and environment variables.

:class:`Settings` holds everything the agent is configured with; each part
of the agent gets only its own small frozen part of it (kopf's per-concern
settings): :class:`DvfsSettings`, :class:`HttpAuthSettings`,
:class:`ElasticSettings`, :class:`DiagnosticsSettings`, and what a worker
and its node controller read, :class:`WorkerSettings` and
:class:`ControllerSettings` (:meth:`Settings.worker`). Every default is the
options table's (:mod:`agentpool.config.options`) run through its parser,
and :func:`load_settings` is a loop over the same table. Flags win over the
environment. Anything that does not parse or is out of range raises
:class:`ConfigError` naming the variable, and the CLI turns that into exit
status 2 before anything starts.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentpool.config.env_routing import read_routing
from agentpool.config.joulie import UNREAD, client_limit
from agentpool.config.options import (
    OPTIONS,
    ROUTING,
    AgentMode,
    DvfsControllerKind,
    JoulieApi,
    LogFormat,
    Membership,
    Option,
    StaleAction,
    option,
)
from agentpool.errors import ConfigError
from agentpool.pool.assignment import Assignment, ordinal_from_pod_name
from agentpool.resources.routing import NodeRouting

PARTS = ("dvfs", "elastic", "http_auth", "diagnostics")
"""The :class:`Settings` fields that are a part's settings, filled by ``part.field`` options."""


def _fields(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Parsed values by variable -> fields by part ('' is :class:`Settings` itself)."""
    fields: dict[str, dict[str, Any]] = {"": {}, **{part: {} for part in PARTS}}
    for opt in OPTIONS:
        if opt.to == ROUTING:
            continue  # composed from several options by load_settings
        value = values[opt.env]
        targets = opt.to if isinstance(opt.to, tuple) else (opt.to,)
        parts = value if isinstance(opt.to, tuple) else (value,)
        for target, part in zip(targets, parts, strict=True):
            group, _, name = target.rpartition(".")
            fields[group][name] = part
    return fields


# The dataclass defaults are the table's defaults, parsed: one source for both.
_DEFAULTS = _fields({opt.env: opt.value(None) for opt in OPTIONS})
_TOP, _DVFS, _ELASTIC, _AUTH, _DIAG = (_DEFAULTS[part] for part in ("", *PARTS))


@dataclass(frozen=True)
class DvfsSettings:
    """Tunables of the DVFS fallback controllers (docs/configuration.md).

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
    """How an elastic pool finds its members and shares nodes (docs/modes.md: elastic pool)."""

    membership: Membership = _ELASTIC["membership"]
    """Static pools ignore everything below."""
    assignment: Assignment = _ELASTIC["assignment"]
    """How nodes map to the live members."""
    lease_duration_s: float = _ELASTIC["lease_duration_s"]
    """``leaseDurationSeconds`` of this pod's Lease."""
    renew_s: float = _ELASTIC["renew_s"]
    """Renewal period; a pod that could not renew for duration - renew stops its workers."""
    namespace: str | None = _ELASTIC["namespace"]
    """Namespace of the Leases and of the StatefulSet."""
    statefulset: str | None = _ELASTIC["statefulset"]
    """The StatefulSet whose ``spec.replicas`` is followed."""

    @property
    def lease(self) -> bool:
        return self.membership is Membership.LEASE


@dataclass(frozen=True)
class HttpAuthSettings:
    """Credentials of HTTP telemetry/control endpoints (docs/configuration.md)."""

    ca_bundle: str | None = _AUTH["ca_bundle"]
    """PEM file of the CAs of ``https`` endpoints; None: the system store."""
    token_file: str | None = _AUTH["token_file"]
    """A bearer token for ``https`` endpoints, re-read when the file changes."""
    client_cert: str | None = _AUTH["client_cert"]
    """Client certificate (PEM); set with ``client_key`` or not at all."""
    client_key: str | None = _AUTH["client_key"]
    """Its private key (PEM)."""

    @property
    def configured(self) -> bool:
        return any((self.ca_bundle, self.token_file, self.client_cert, self.client_key))

    def tls_context(self) -> ssl.SSLContext:
        """The TLS context these files make, loaded now (they may change later)."""
        context = ssl.create_default_context(cafile=self.ca_bundle)
        # Python 3.13 made the default context strict (RFC 5280's rules, such as a CA
        # naming its key usage); Go's verifier, Joulie's agent's, is not. A CA bundle that
        # Joulie's agent accepts is accepted here too, on every interpreter.
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
        if self.client_cert and self.client_key:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


@dataclass(frozen=True)
class DiagnosticsSettings:
    """The diagnostics options (docs/configuration.md): what production leaves on, switched
    off to measure it or to rule it out, and a hook into every worker for tests and
    benchmarks. The fork server is given them on its command line, before it preloads."""

    pack_code: bool = _DIAG["pack_code"]
    """Copy the code objects a new worker writes next to each other (``codepack``)."""
    immortalize: bool = _DIAG["immortalize"]
    """Make the fork server's heap immortal where the interpreter allows (``immortal``)."""
    fill_holes: bool = _DIAG["fill_holes"]
    """Fill the allocators' free memory before forking (``holes``)."""
    proctitle: bool = _DIAG["proctitle"]
    """Name each process and thread (:mod:`agentpool.proctitle`)."""
    worker_hook: str | None = _DIAG["worker_hook"]
    """What every worker calls first (:func:`agentpool.config.parsers.load_hook`)."""


def read_token(path: str) -> str:
    """The bearer token in ``path``, stripped (a Secret's file ends in a newline or not)."""
    with open(path, encoding="utf-8") as handle:
        return handle.read().strip()


@dataclass(frozen=True)
class ControllerSettings:
    """What one node controller reads, and nothing else (built by :meth:`Settings.controller`)."""

    sysfs_root: str = _TOP["sysfs_root"]
    """Host sysfs mount; may contain '{node}'."""
    simulate_only: bool = _TOP["simulate_only"]
    """Compute and log, write nothing to hosts or control endpoints."""
    restore_on_exit: bool = _TOP["restore_on_exit"]
    """Restore changed host values on graceful stop."""
    remote: bool = False
    """A pool pod: its nodes are not the host it runs on, so it never caps this host's GPUs."""
    spec_read_timeout_s: float = _TOP["spec_read_timeout_s"]
    """Desired state unconfirmed from the API this long is stale."""
    spec_stale_action: StaleAction = _TOP["spec_stale_action"]
    """What the controller does with stale desired state."""
    routing: NodeRouting = field(default_factory=NodeRouting)
    """Routing by the TELEMETRY_* variables, for a node no TelemetryProfile targets."""
    dvfs: DvfsSettings = field(default_factory=DvfsSettings)
    """DVFS fallback tunables."""
    http_auth: HttpAuthSettings = field(default_factory=HttpAuthSettings)
    """Credentials of HTTP endpoints."""
    pod_name: str = ""
    """Who sends the HTTP requests (their User-Agent): the pod, else this host's name."""
    shard_id: int = 0
    """This pod's shard, also in the User-Agent."""

    def sysfs_root_for(self, node: str) -> str:
        return self.sysfs_root.replace("{node}", node)


@dataclass(frozen=True)
class WorkerSettings:
    """What a worker process reads (built by :meth:`Settings.worker`, sent to each worker)."""

    reconcile_interval_s: float = _TOP["reconcile_interval_s"]
    """Period of the node's reconcile tick."""
    log_format: LogFormat = _TOP["log_format"]
    log_level: str = _TOP["log_level"]
    controller: ControllerSettings = field(default_factory=ControllerSettings)
    """What its node controller reads."""
    requires_fence: bool = False
    """An elastic pool's worker: it acts on nothing before its supervisor sent it a fence
    (:mod:`agentpool.worker.fence`), as another pod may own the node without one."""


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
    hardware_catalog_path: str | None = _TOP["hardware_catalog_path"]
    """Joulie's hardware catalog file; None: no catalog (NodeHardware has no model keys)."""
    dvfs: DvfsSettings = field(default_factory=DvfsSettings)
    """DVFS fallback tunables."""
    restore_on_exit: bool = _TOP["restore_on_exit"]
    """Restore changed host values on graceful stop."""
    shutdown_timeout_s: float = _TOP["shutdown_timeout_s"]
    """How long the supervisor waits for workers to stop before SIGKILL."""
    heartbeat_timeout_s: float | None = _TOP["heartbeat_timeout_s"]
    """A worker that reports nothing for this long is killed and restarted; None: derived
    per node by the supervisor (see ``agentpool.supervisor.clusterview.heartbeat_limit``)."""
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
    routing: NodeRouting = field(default_factory=NodeRouting)
    """CPU and GPU routing from the TELEMETRY_* variables, for nodes no TelemetryProfile
    targets (on either API)."""
    spec_read_timeout_s: float = _TOP["spec_read_timeout_s"]
    """Desired state unconfirmed from the API this long is stale."""
    spec_stale_action: StaleAction = _TOP["spec_stale_action"]
    """What a worker does with stale desired state."""
    http_auth: HttpAuthSettings = field(default_factory=HttpAuthSettings)
    """CA bundle, token file and client certificate of HTTP endpoints."""
    elastic: ElasticSettings = field(default_factory=ElasticSettings)
    """Pool membership (static by default) and the elastic pool's lease settings."""
    events: bool = _TOP["events"]
    """Record Kubernetes Events on the Node objects (docs/metrics.md: Node events)."""
    kube_qps: float | None = _TOP["kube_qps"]
    """KUBE_CLIENT_QPS as given (what it means: :attr:`api_limit`)."""
    kube_burst: int | None = _TOP["kube_burst"]
    """KUBE_CLIENT_BURST as given."""
    notes: tuple[str, ...] = ()
    """Values Joulie's agent accepts that are not taken as given, and what is done instead:
    logged once at start (:mod:`agentpool.config.joulie`)."""

    diagnostics: DiagnosticsSettings = field(default_factory=DiagnosticsSettings)
    """Switches and a worker hook for measuring and testing; production keeps the defaults."""

    @property
    def api_limit(self) -> tuple[float, int] | None:
        """(requests per second, burst) of this pod's own API requests; None: no limit."""
        return client_limit(self.kube_qps, self.kube_burst)

    def sysfs_root_for(self, node: str) -> str:
        return self.sysfs_root.replace("{node}", node)

    def worker(self) -> WorkerSettings:
        """The part a worker process reads."""
        return WorkerSettings(
            self.reconcile_interval_s, self.log_format, self.log_level, self.controller(),
            requires_fence=self.mode is AgentMode.POOL and self.elastic.lease,
        )

    def controller(self) -> ControllerSettings:
        """The part a node controller reads (built once per worker, sent to it)."""
        return ControllerSettings(
            sysfs_root=self.sysfs_root,
            simulate_only=self.simulate_only,
            restore_on_exit=self.restore_on_exit,
            remote=self.mode is AgentMode.POOL,
            spec_read_timeout_s=self.spec_read_timeout_s,
            spec_stale_action=self.spec_stale_action,
            routing=self.routing,
            dvfs=self.dvfs,
            http_auth=self.http_auth,
            # In a pod the hostname is the pod's name: a daemonset pod without POD_NAME too.
            pod_name=self.pod_name or socket.gethostname(),
            shard_id=self.pool_shard_id,
        )


def load_settings(raw: Mapping[str, str | None]) -> Settings:
    """Validate raw string values (by variable name) into :class:`Settings`.

    ``raw`` holds what the user gave, flags already merged over the
    environment; a missing, None or blank entry takes the option's default.
    Options are parsed in table order, then the rules that join several
    options run. A value Joulie's agent runs with is replaced where the
    option says so (:mod:`agentpool.config.joulie`), each replacement a line of
    :attr:`Settings.notes`; so is each variable of :data:`~agentpool.config.joulie.UNREAD`
    that is set.
    """
    notes: list[str] = []
    values = {opt.env: _parse(opt, raw.get(opt.env), notes) for opt in OPTIONS}
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
    fields = _fields(values)
    http_auth = HttpAuthSettings(**fields["http_auth"])
    _check_http_auth(http_auth)
    routing, routing_notes = read_routing(values, pool=mode is AgentMode.POOL)
    notes.extend(routing_notes)
    notes.extend(f"{env} is not read: {why}" for env, why in UNREAD.items() if raw.get(env))
    return Settings(
        **fields[""],
        dvfs=DvfsSettings(**fields["dvfs"]),
        routing=routing,
        http_auth=http_auth,
        elastic=_elastic(ElasticSettings(**fields["elastic"]), values, raw, mode),
        notes=tuple(notes),
        diagnostics=DiagnosticsSettings(**fields["diagnostics"]),
    )


def _parse(opt: Option, raw: str | None, notes: list[str]) -> Any:
    """The option's value; where its parser refuses a value Joulie's agent runs with, the
    value its fallback gives instead, said in ``notes``."""
    try:
        return opt.value(raw)
    except ConfigError as exc:
        if opt.joulie is None or raw is None:
            raise
        instead = opt.joulie(raw, exc)
        value = opt.value(instead.raw)
        shown = instead.raw or (f"the default {opt.default}" if opt.default else None)
        notes.append(f"{opt.env}={raw!r}: {instead.says}" + (f"; using {shown}" if shown else ""))
        return value


def _check_http_auth(auth: HttpAuthSettings) -> None:
    """At start: every credential file readable and usable, or a ConfigError naming it."""
    if bool(auth.client_cert) != bool(auth.client_key):
        missing = "HTTP_CLIENT_KEY" if auth.client_cert else "HTTP_CLIENT_CERT"
        raise ConfigError(
            missing, "", "required with the other of HTTP_CLIENT_CERT/HTTP_CLIENT_KEY"
        )
    checks = (
        ("HTTP_CA_BUNDLE", auth.ca_bundle),
        ("HTTP_TOKEN_FILE", auth.token_file),
        ("HTTP_CLIENT_CERT", auth.client_cert),
        ("HTTP_CLIENT_KEY", auth.client_key),
    )
    for variable, path in checks:
        if path is not None and not os.access(path, os.R_OK):
            raise ConfigError(variable, path, "expected a readable file")
    try:
        auth.tls_context()
    except (ssl.SSLError, OSError) as exc:
        variable = "HTTP_CA_BUNDLE" if auth.ca_bundle else "HTTP_CLIENT_CERT"
        value = auth.ca_bundle or auth.client_cert or ""
        raise ConfigError(variable, value, f"expected PEM files that load ({exc})") from None
    if auth.token_file is not None:
        try:
            token = read_token(auth.token_file)
        except (OSError, UnicodeDecodeError) as exc:  # a directory, a FIFO gone wrong, not text
            problem = f"expected a readable token file ({exc})"
            raise ConfigError("HTTP_TOKEN_FILE", auth.token_file, problem) from None
        if not token:
            raise ConfigError("HTTP_TOKEN_FILE", auth.token_file, "expected a non-empty token")


def _elastic(
    elastic: ElasticSettings,
    values: Mapping[str, Any],
    raw: Mapping[str, str | None],
    mode: AgentMode,
) -> ElasticSettings:
    """The elastic-pool settings checked; in lease mode POD_NAME, the namespace and a
    StatefulSet are required (the StatefulSet defaults to POD_NAME less its ordinal)."""
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
