"""One row per managed node, from raw cluster objects; pure, the clock passed in.

Which API a node follows is decided as the agent decides it with
``JOULIE_API=auto`` (``ClusterView.api_of``, over the objects the supervisor
watches): its NodeTwin if one targets it, else its NodePowerProfile. Its
owner is the pod whose live Lease claims it (elastic pools), else its shard
when its pool's shard count is known (:mod:`.pools`: ``--shards``, or the
static pool's StatefulSet). Whether that owner is alive: for an elastic
pool, its Lease (``renewTime`` + duration compared with this machine's
clock, so a skewed clock shifts it); otherwise the age of the node's status,
which a live agent rewrites at least every heartbeat.

Its power: what the agent observed of the CPU packages (the profile API's
``observed``, in a TelemetryProfile), else, for a node on the NodeTwin API,
whose status has no room for it (Joulie's schema declares four keys in
``controlStatus``), the whole node's power that Joulie's operator measured
and wrote in the NodeTwin's ``status.powerMeasurement`` (from Prometheus or an
HTTP endpoint; not its ``static`` or ``utilization`` estimates, nor a 0 that
means it measured nothing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentpool.errors import ProfileError
from agentpool.kubectl.pools import Pools
from agentpool.pool.assignment import shard_of
from agentpool.pool.membership import ANNOTATION_CLAIMS, decode_claims
from agentpool.resources.nodeinputs import NodeApi
from agentpool.resources.parse import (
    NPP,
    NT,
    metadata_name,
    parse_power_profile,
    spec_node_name,
    target_of,
)

Raw = Mapping[str, Any]


@dataclass(frozen=True)
class Options:
    now: datetime
    pools: Pools = field(default_factory=Pools)
    """Static pools: their shard counts, to name each node's shard (fnv32a, as the agent)."""
    stale_s: float = 660.0
    """A status older than this means nobody keeps it (no live owner)."""


@dataclass(frozen=True)
class NodeRow:
    node: str
    owner: str | None
    """A pod name (elastic pool), ``shard N`` (static), or None: unknown."""
    owner_live: bool | None
    """None: cannot tell (no Lease, no status)."""
    api: NodeApi
    """Where its desired state comes from."""
    cpu_cap: str | None
    gpu_cap: str | None
    result: str | None
    backend: str | None
    message: str | None
    gpu_result: str | None
    gpu_backend: str | None
    power_w: float | None
    power_from: str | None
    """Where :attr:`power_w` was read (its field), which says what it measures."""
    gpu_power_w: float | None
    updated_at: datetime | None
    age_s: float | None
    problems: tuple[str, ...]

    @property
    def whole_node_power(self) -> bool:
        """:attr:`power_w` is the whole node's (Joulie's operator's measurement), not the
        CPU packages' the agent observed."""
        return (self.power_from or "").startswith("powerMeasurement.")

    def as_json(self) -> dict[str, Any]:
        return {
            "node": self.node, "owner": self.owner, "ownerLive": self.owner_live,
            "api": self.api.value, "cpuCap": self.cpu_cap, "gpuCap": self.gpu_cap,
            "result": self.result, "backend": self.backend, "message": self.message,
            "gpuResult": self.gpu_result, "gpuBackend": self.gpu_backend,
            "powerWatts": self.power_w, "powerFrom": self.power_from,
            "gpuPowerWatts": self.gpu_power_w,
            "updatedAt": None if self.updated_at is None else _rfc3339(self.updated_at),
            "ageSeconds": None if self.age_s is None else round(self.age_s, 3),
            "problems": list(self.problems),
        }


def _rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: Any) -> datetime | None:
    """An RFC 3339 time as the apiserver writes it (seconds or microseconds, ``Z``)."""
    if not isinstance(text, str) or not text:
        return None
    with contextlib.suppress(ValueError):
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def _map(value: Any) -> Raw:
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else None


def _oldest(objs: list[Raw]) -> Raw | None:
    if not objs:
        return None
    return min(objs, key=lambda o: (str(_map(o.get("metadata")).get("creationTimestamp") or ""),
                                    metadata_name(o)))


def _by_node(objs: Iterable[Raw], node_of: Any) -> dict[str, Raw]:
    grouped: dict[str, list[Raw]] = {}
    for obj in objs:
        node = node_of(obj)
        if node:
            grouped.setdefault(node, []).append(obj)
    return {node: chosen for node, group in grouped.items()
            if (chosen := _oldest(group)) is not None}


def _tp_node(obj: Raw) -> str | None:
    scope, node = target_of(obj)
    return node if scope == "node" else None


@dataclass(frozen=True)
class _Lease:
    pod: str
    live: bool
    expired_s: float
    claims: frozenset[str]


def _leases(leases: Iterable[Raw], now: datetime) -> list[_Lease]:
    out = []
    for lease in leases:
        meta, spec = _map(lease.get("metadata")), _map(lease.get("spec"))
        holder = spec.get("holderIdentity")
        renewed = parse_time(spec.get("renewTime"))
        duration = _number(spec.get("leaseDurationSeconds")) or 0.0
        try:
            claims = decode_claims(_map(meta.get("annotations")).get(ANNOTATION_CLAIMS))
        except ValueError:
            claims = frozenset()
        if not holder or renewed is None:
            continue  # released on a clean exit: claims nothing
        left = (renewed - now).total_seconds() + duration
        out.append(_Lease(str(meta.get("name") or holder), left > 0, -left, claims))
    return out


def _caps(desired: Raw | None, kind: str) -> tuple[str | None, str | None, str | None]:
    """(CPU cap, GPU cap, problem) as people read them: ``120 W``, ``60%``, ``250 W/GPU``."""
    if desired is None:
        return None, None, None
    try:
        policy = parse_power_profile(desired, kind=kind)
    except ProfileError as exc:
        return "invalid", None, f"desired state invalid: {exc}"
    cpu = None
    if policy.cap_watts is not None:
        cpu = f"{policy.cap_watts:g} W"
    elif policy.cap_pct is not None:
        cpu = f"{policy.cap_pct:g}%"
    gpu = None
    if policy.gpu_cap is not None:
        cap = policy.gpu_cap
        gpu = (f"{cap.watts_per_gpu:g} W/GPU" if cap.watts_per_gpu is not None
               else f"{cap.pct_of_max:g}%/GPU")
    return cpu, gpu, None


def short_duration(seconds: float) -> str:
    """kubectl's short human duration: ``45s``, ``12m``, ``5h``, ``3d``, ``2y``."""
    s = int(max(0.0, seconds))
    if s < 120:
        return f"{s}s"
    if s < 3600 * 2:
        return f"{s // 60}m"
    if s < 86400 * 2:
        return f"{s // 3600}h"
    if s < 86400 * 365 * 2:
        return f"{s // 86400}d"
    return f"{s // (86400 * 365)}y"


def build_rows(
    nodes: Iterable[Raw],
    power_profiles: Iterable[Raw],
    telemetry_profiles: Iterable[Raw],
    node_twins: Iterable[Raw],
    leases: Iterable[Raw],
    options: Options,
) -> list[NodeRow]:
    """The rows of the managed nodes (those given), sorted by name."""
    npps = _by_node(power_profiles, spec_node_name)
    tps = _by_node(telemetry_profiles, _tp_node)
    twins = _by_node(node_twins, spec_node_name)
    pool = _leases(leases, options.now)
    labels = {metadata_name(n): _labels(n) for n in nodes}
    rows = []
    for node in sorted(labels):
        rows.append(_row(node, labels[node], npps.get(node), tps.get(node), twins.get(node),
                         pool, options))
    return rows


def _labels(node: Raw) -> dict[str, str]:
    labels = _map(_map(node.get("metadata")).get("labels"))
    return {str(k): str(v) for k, v in labels.items()}


POWER_FIELDS = ("packagePowerWatts", "observedPowerWatts")
"""What the agent's ``observed`` reports power in: host RAPL's package total, and the power
the DVFS fallback controls on."""
ESTIMATES = ("static", "utilization")
"""``powerMeasurement.source`` values that are no measurement (Joulie's CRD: estimates)."""


def _power(observed: Raw, twin_status: Raw | None) -> tuple[float | None, str | None]:
    """(watts, the field they were read from)."""
    for key in POWER_FIELDS:
        power = _number(observed.get(key))
        if power is not None:
            return power, f"observed.{key}"
    if twin_status is None:
        return None, None
    measured = _map(twin_status.get("powerMeasurement"))
    power = _number(measured.get("measuredNodePowerW"))
    source = measured.get("source")
    if power is None or power <= 0 or source in ESTIMATES:
        return None, None
    return power, f"powerMeasurement.measuredNodePowerW ({source or 'no source'})"


def _row(
    node: str, labels: Mapping[str, str], npp: Raw | None, tp: Raw | None, twin: Raw | None,
    pool: list[_Lease], options: Options,
) -> NodeRow:
    problems: list[str] = []
    desired: Raw | None
    if twin is not None:
        api, desired, kind = NodeApi.NODETWIN, twin, NT
        status = _map(_map(twin.get("status")).get("controlStatus"))
    else:
        api, desired, kind = (
            (NodeApi.PROFILES, npp, NPP) if npp else (NodeApi.NONE, None, "")
        )
        status = _map(_map(_map(tp).get("status")).get("control"))
    cpu_cap, gpu_cap, invalid = _caps(desired, kind)
    if invalid:
        problems.append(invalid)
    cpu, gpu = _map(status.get("cpu")), _map(status.get("gpu"))
    updated = parse_time(cpu.get("updatedAt"))
    age = None if updated is None else (options.now - updated).total_seconds()
    twin_status = _map(twin.get("status")) if twin is not None else None
    power, power_from = _power(_map(cpu.get("observed")), twin_status)
    gpu_observed = _map(gpu.get("observed"))
    shards = options.pools.shards_of(labels)
    owner, live = _owner(node, shards, pool, age, options, problems)
    result = cpu.get("result") if isinstance(cpu.get("result"), str) else None
    if result == "error":
        problems.append(f"result error: {cpu.get('message') or ''}".rstrip(": "))
    if gpu.get("result") == "error":
        problems.append(f"GPU result error: {gpu.get('message') or ''}".rstrip(": "))
    return NodeRow(
        node=node, owner=owner, owner_live=live, api=api, cpu_cap=cpu_cap, gpu_cap=gpu_cap,
        result=result, backend=_text(cpu.get("backend")), message=_text(cpu.get("message")),
        gpu_result=_text(gpu.get("result")), gpu_backend=_text(gpu.get("backend")),
        power_w=power, power_from=power_from,
        gpu_power_w=_number(gpu_observed.get("powerWattsTotal")),
        updated_at=updated, age_s=age, problems=tuple(problems),
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _owner(
    node: str, shards: int | None, pool: list[_Lease], age: float | None, options: Options,
    problems: list[str],
) -> tuple[str | None, bool | None]:
    if pool:
        claiming = [lease for lease in pool if node in lease.claims]
        live = [lease.pod for lease in claiming if lease.live]
        if live:
            return ",".join(sorted(live)), True
        if claiming:
            dead = min(claiming, key=lambda lease: lease.expired_s)
            problems.append(f"no live owner: the lease of {dead.pod} expired "
                            f"{short_duration(dead.expired_s)} ago")
            return dead.pod, False
        problems.append("no live owner: no live pool pod claims it")
        return None, False
    owner = f"shard {shard_of(node, shards)}" if shards else None
    if age is None:
        return owner, None
    if age > options.stale_s:
        problems.append(f"no live owner: its status was last written {short_duration(age)} ago "
                        f"(a live agent rewrites it every few minutes)")
        return owner, False
    return owner, True
