"""Sharding (README "Modes"): FNV-1a vectors, ownership and StatefulSet ordinals."""

from __future__ import annotations

import collections

import pytest

from agentpool.pool.assignment import fnv32a, ordinal_from_pod_name, owns, shard_of


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0x811C9DC5),
        ("a", 0xE40C292C),
        ("foobar", 0xBF9CF968),
        # More published FNV-1a 32-bit test vectors (Landon Curt Noll's fnv test suite).
        ("b", 0xE70C2DE5),
        ("fo", 0x6222E842),
        ("foob", 0x3F5076EF),
    ],
)
def test_fnv32a_known_values(text: str, expected: int) -> None:
    assert fnv32a(text) == expected


def test_fnv32a_hashes_utf8_bytes_and_stays_32_bit() -> None:
    # "é" is two UTF-8 bytes; hashing code points instead would give another value.
    by_hand = 0x811C9DC5
    for byte in "é".encode():
        by_hand = ((by_hand ^ byte) * 16777619) % 2**32
    assert fnv32a("é") == by_hand
    assert all(0 <= fnv32a(f"node-{i}" * 40) < 2**32 for i in range(50))


def test_owner_of_the_acceptance_node() -> None:
    assert shard_of("kwok-node-17", 7) == 4
    assert fnv32a("kwok-node-17") % 7 == 4


def test_500_kwok_nodes_spread_over_5_shards() -> None:
    counts = collections.Counter(shard_of(f"kwok-node-{i}", 5) for i in range(500))
    assert sorted(counts) == [0, 1, 2, 3, 4]
    assert all(60 <= n <= 140 for n in counts.values()), counts


@pytest.mark.parametrize("shards", [-1, 0, 1])
def test_one_shard_or_fewer_owns_everything(shards: int) -> None:
    for name in ("", "a", "kwok-node-17", "worker-0"):
        assert shard_of(name, shards) == 0
        assert owns(name, shards, 0)
        assert not owns(name, shards, 1)


def test_every_node_has_exactly_one_owner() -> None:
    for i in range(200):
        node = f"kwok-node-{i}"
        owners = [sid for sid in range(4) if owns(node, 4, sid)]
        assert owners == [fnv32a(node) % 4]


@pytest.mark.parametrize(
    ("pod", "ordinal"),
    [
        ("joulie-agent-pool-3", 3),
        ("joulie-agent-pool-0", 0),
        ("joulie-agent-pool-12", 12),
        ("pool7", 7),
        ("42", 42),
        ("joulie-agent-pool-007", 7),
        ("joulie-agent-pool", None),
        ("joulie-agent-pool-3a", None),
        ("", None),
    ],
)
def test_ordinal_from_pod_name(pod: str, ordinal: int | None) -> None:
    assert ordinal_from_pod_name(pod) == ordinal
