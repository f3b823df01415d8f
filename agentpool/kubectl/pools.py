"""Static agent pools found in the cluster: each one's shard count and node selector.

A static pool is a StatefulSet whose pod template runs the agent with
``AGENT_MODE=pool`` (agentpool's chart and Joulie's both set it there, with
``POOL_SHARDS`` and ``POOL_NODE_SELECTOR``) and without
``POOL_MEMBERSHIP=lease`` (an elastic pool's Leases name each node's pod
instead). Its variables are read as the agent reads them, with the agent's
own parsers and defaults (:func:`~agentpool.config.options.option`): unset,
``POOL_SHARDS`` is 1, as for the agent, whatever the replica count (the
charts render it from the replicas, so it is set); 0 is one shard too. What
cannot be read from the object (a ``valueFrom``, an ``envFrom`` that may set
it) makes the count unknown rather than guessed.

A node's shard is its pool's ``fnv32a(node) % shards``, the pool being the one
whose node selector matches the node's labels (several pools that agree on
the count do as well). ``--shards`` stands for one pool of every node. Pure:
the raw StatefulSets in, pools and notes out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agentpool.config.options import AgentMode, Membership, option
from agentpool.errors import ConfigError, SelectorError
from agentpool.labelselectors import Selector, parse_selector

Raw = Mapping[str, Any]


@dataclass(frozen=True)
class StaticPool:
    shards: int
    """At least 1 (the agent takes 0 as one shard)."""
    source: str
    """Where the count was found, as the note says it."""
    selector: Selector | None = None
    """Its ``POOL_NODE_SELECTOR``; None: every node (``--shards``)."""
    selector_text: str | None = None

    def selects(self, labels: Mapping[str, str]) -> bool:
        return self.selector is None or self.selector.matches(labels)

    def note(self) -> str:
        return f"shards: {self.shards} ({self.source})"

    def as_json(self) -> dict[str, Any]:
        return {"shards": self.shards, "source": self.source, "nodeSelector": self.selector_text}


@dataclass(frozen=True)
class Pools:
    """What the StatefulSets say: the static pools, and lines for the user."""

    pools: tuple[StaticPool, ...] = ()
    notes: tuple[str, ...] = ()

    def shards_of(self, labels: Mapping[str, str]) -> int | None:
        """The shard count of the node with these labels; None when no pool, or pools that
        disagree, select it."""
        counts = {pool.shards for pool in self.pools if pool.selects(labels)}
        return counts.pop() if len(counts) == 1 else None


def given(shards: int) -> Pools:
    """``--shards N``: one pool of every node, whatever the cluster has."""
    pool = StaticPool(shards, "--shards")
    return Pools((pool,), (pool.note(),))


def _map(value: Any) -> Raw:
    return value if isinstance(value, Mapping) else {}


def _agent_env(template: Raw) -> tuple[dict[str, Any], bool] | None:
    """The env (name -> its entry) of the container that runs the agent in pool mode, and
    whether it also has ``envFrom``; None when no container does."""
    for container in _map(template.get("spec")).get("containers") or []:
        if not isinstance(container, Mapping):
            continue
        env = {str(e.get("name")): e for e in container.get("env") or [] if isinstance(e, Mapping)}
        mode = env.get("AGENT_MODE", {}).get("value")
        try:
            if isinstance(mode, str) and option("AGENT_MODE").value(mode) is AgentMode.POOL:
                return env, bool(container.get("envFrom"))
        except ConfigError:
            continue
    return None


def _pool(where: str, env: Mapping[str, Any], env_from: bool) -> StaticPool | str:
    """The pool of one StatefulSet, or why its shard count cannot be told."""
    entry = env.get("POOL_SHARDS")
    if entry is not None and "value" not in entry:
        return f"shards: unknown (StatefulSet {where}: POOL_SHARDS comes from valueFrom)"
    if entry is None and env_from:
        return (f"shards: unknown (StatefulSet {where}: POOL_SHARDS is not in env, and its "
                f"envFrom may set it)")
    raw = entry.get("value") if entry is not None else None
    try:
        shards: int = option("POOL_SHARDS").value(raw if isinstance(raw, str) else None)
        text: str = option("POOL_NODE_SELECTOR").value(
            _map(env.get("POOL_NODE_SELECTOR")).get("value"))
        selector = parse_selector(text)
    except (ConfigError, SelectorError) as exc:
        return f"shards: unknown (StatefulSet {where}: {exc})"
    if entry is None:
        source = f"StatefulSet {where}, POOL_SHARDS unset: the agent's default"
    else:
        source = f"StatefulSet {where}, POOL_SHARDS"
        if shards == 0:
            source += "=0: one shard"
    return StaticPool(max(shards, 1), source, selector, text)


def static_pools(statefulsets: Iterable[Raw]) -> Pools:
    """The static agent pools among ``statefulsets``, sorted by namespace and name."""
    pools: list[StaticPool] = []
    notes: list[str] = []
    for sts in sorted(statefulsets, key=_where):
        spec = _map(sts.get("spec"))
        found = _agent_env(_map(spec.get("template")))
        if found is None:
            continue
        env, env_from = found
        membership = _map(env.get("POOL_MEMBERSHIP")).get("value")
        try:
            if option("POOL_MEMBERSHIP").value(membership) is Membership.LEASE:
                continue  # elastic: its Leases say who owns what
        except ConfigError:
            pass  # the pods exit 2 naming it; its shard count is still what it says
        where = _where(sts)
        pool = _pool(where, env, env_from)
        if isinstance(pool, str):
            notes.append(pool)
            continue
        pools.append(pool)
        notes.append(pool.note())
        replicas = spec.get("replicas")
        if isinstance(replicas, int) and replicas != pool.shards:
            notes.append(f"note: StatefulSet {where} runs {replicas} replica(s) for "
                         f"{pool.shards} shard(s): each pod serves the shard of its ordinal")
    return Pools(tuple(pools), tuple(notes))


def _where(sts: Raw) -> str:
    meta = _map(sts.get("metadata"))
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def find_pools(
    statefulsets: Iterable[Raw] | None, unreadable: str | None, elastic: bool,
    namespace: str | None, shards: int | None,
) -> Pools:
    """The shard counts ``status`` uses: ``--shards`` (``shards``) wins; else the cluster's
    static pools, or a note saying why none is known (``unreadable``: why the StatefulSets
    could not be listed; ``elastic``: pool Leases were found, which name the owners)."""
    if shards is not None:
        return given(shards)
    hint = "--shards N names each node's shard"
    if unreadable is not None:
        return Pools((), (f"shards: unknown (StatefulSets not listed: {unreadable}): {hint}",))
    found = static_pools(statefulsets or ())
    if found.notes or elastic:
        return found
    where = f"namespace {namespace}" if namespace else "any namespace"
    return Pools((), (f"shards: not found (no StatefulSet in {where} runs the agent with "
                      f"AGENT_MODE=pool): {hint}",))
