"""Which pool pod owns which node: 32-bit FNV-1a of the node name, modulo shards.

Every replica computes the same function independently, so there is no
coordination: the hash must stay bit-for-bit what the contract says.
"""

from __future__ import annotations

import re

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
