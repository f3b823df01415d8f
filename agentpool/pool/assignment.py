"""Which pool pod owns which node.

Static pools: 32-bit FNV-1a of the node name, modulo shards. Every replica
computes the same function independently, so there is no coordination: the
hash must stay bit-for-bit what docs/modes.md says. Elastic pools
(``POOL_MEMBERSHIP=lease``): the same formula over the live members
(``modulo``) or rendezvous hashing (``rendezvous``), both pure functions of
the node name and the member names (the members come from
:mod:`agentpool.pool.membership`).
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Iterable, Sequence

FNV32_OFFSET = 2166136261
FNV32_PRIME = 16777619

_ORDINAL = re.compile(r"(\d+)$")


def fnv32a(text: str) -> int:
    """32-bit FNV-1a over the UTF-8 bytes of ``text``."""
    h = FNV32_OFFSET
    for byte in text.encode("utf-8"):
        h ^= byte
        h = (h * FNV32_PRIME) & 0xFFFFFFFF
    return h


def shard_of(node_name: str, shards: int) -> int:
    """The shard owning ``node_name``; with ``shards <= 1`` it is always 0."""
    if shards <= 1:
        return 0
    return fnv32a(node_name) % shards


def owns(node_name: str, shards: int, shard_id: int) -> bool:
    return shard_of(node_name, shards) == shard_id


def ordinal_from_pod_name(pod_name: str) -> int | None:
    """The StatefulSet ordinal: the trailing integer (``joulie-agent-pool-3`` -> 3)."""
    match = _ORDINAL.search(pod_name)
    return int(match.group(1)) if match else None


# -- elastic pools: assignment over a set of named members ---------------------------------------


class Assignment(enum.StrEnum):
    """How an elastic pool (``POOL_MEMBERSHIP=lease``) maps nodes to its members."""

    MODULO = "modulo"
    """``fnv32a(node) % len(members)`` indexes the members sorted by ordinal, then name:
    the static pool's formula over the current count (most nodes move when it changes)."""
    RENDEZVOUS = "rendezvous"
    """The member with the highest :func:`rendezvous_score` for the node: growing
    from N to N+1 members moves about 1/(N+1) of the nodes, all to the newcomer."""


def member_order(members: Iterable[str]) -> list[str]:
    """Members sorted by StatefulSet ordinal (no ordinal sorts last), then by name."""
    def key(name: str) -> tuple[int, int, str]:
        ordinal = ordinal_from_pod_name(name)
        return (0, ordinal, name) if ordinal is not None else (1, 0, name)

    return sorted(set(members), key=key)


def rendezvous_score(node_name: str, member: str) -> int:
    """64-bit score of (node, member): blake2b, 8-byte digest, of ``member NUL node``, big-endian.

    A keyed cryptographic hash rather than FNV because rendezvous hashing
    needs scores that are independent across members; FNV of similar names
    ("pool-3", "pool-4") is strongly correlated in its low bits.
    """
    digest = hashlib.blake2b(f"{member}\0{node_name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner_of(node_name: str, members: Sequence[str], assignment: Assignment) -> str | None:
    """The member owning ``node_name``; None when there are no members.

    ``members`` must already be in :func:`member_order` for modulo (rendezvous
    does not depend on order; a tie, which needs a 64-bit collision, goes to
    the greater name).
    """
    if not members:
        return None
    if assignment is Assignment.MODULO:
        return members[fnv32a(node_name) % len(members)]
    return max(members, key=lambda m: (rendezvous_score(node_name, m), m))
