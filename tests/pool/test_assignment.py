"""Which pod owns which node: FNV-1a shards (docs/modes.md), StatefulSet ordinals, and the
elastic pool's modulo over members, rendezvous and member order (docs/modes.md: elastic pool)."""

from __future__ import annotations

import collections
import hashlib

import pytest

from agentpool.pool.assignment import (
    Assignment,
    fnv32a,
    member_order,
    ordinal_from_pod_name,
    owner_of,
    owns,
    rendezvous_score,
    shard_of,
)

NODES = [f"kwok-node-{i}" for i in range(2000)]


def pods(n: int) -> list[str]:
    return [f"joulie-agent-pool-{i}" for i in range(n)]


def owners(members: list[str], assignment: Assignment) -> dict[str, str | None]:
    return {node: owner_of(node, members, assignment) for node in NODES}


def test_modulo_over_dense_ordinals_is_the_static_contract() -> None:
    members = pods(5)
    for node in NODES[:300]:
        assert owner_of(node, members, Assignment.MODULO) == members[shard_of(node, 5)]


def test_members_are_ordered_by_ordinal_not_as_text() -> None:
    assert member_order(["p-10", "p-2", "x", "p-2", "p-0"]) == ["p-0", "p-2", "p-10", "x"]


def test_rendezvous_score_is_blake2b_of_member_nul_node() -> None:
    digest = hashlib.blake2b(b"pool-1\0node-a", digest_size=8).digest()
    assert rendezvous_score("node-a", "pool-1") == int.from_bytes(digest, "big")


def test_growing_4_to_5_rendezvous_moves_about_a_fifth_all_to_the_newcomer() -> None:
    before, after = owners(pods(4), Assignment.RENDEZVOUS), owners(pods(5), Assignment.RENDEZVOUS)
    moved = [node for node in NODES if before[node] != after[node]]
    # Expected 2000/5 = 400; 340..460 is about 3 standard deviations.
    assert 340 <= len(moved) <= 460, len(moved)
    assert {after[node] for node in moved} == {"joulie-agent-pool-4"}


def test_growing_4_to_5_modulo_moves_about_four_fifths() -> None:
    before, after = owners(pods(4), Assignment.MODULO), owners(pods(5), Assignment.MODULO)
    moved = sum(before[node] != after[node] for node in NODES)
    assert 1500 <= moved <= 1700, moved


def test_shrinking_rendezvous_moves_only_the_leavers_nodes() -> None:
    before, after = owners(pods(5), Assignment.RENDEZVOUS), owners(pods(2), Assignment.RENDEZVOUS)
    for node in NODES:
        if before[node] in pods(2):
            assert after[node] == before[node]


@pytest.mark.parametrize("assignment", list(Assignment))
def test_every_member_gets_a_fair_share(assignment: Assignment) -> None:
    counts = collections.Counter(owners(pods(5), assignment).values())
    assert set(counts) == set(pods(5))
    assert all(320 <= n <= 480 for n in counts.values()), counts


@pytest.mark.parametrize("assignment", list(Assignment))
def test_no_members_no_owner(assignment: Assignment) -> None:
    assert owner_of("node-a", [], assignment) is None


def test_a_gap_in_ordinals_is_modulo_over_the_live_count() -> None:
    members = member_order(["p-0", "p-2", "p-3"])
    node = "kwok-node-17"
    assert owner_of(node, members, Assignment.MODULO) == members[fnv32a(node) % 3]


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
    assert fnv32a("é") == reference_fnv1a_32("é".encode())
    assert all(0 <= fnv32a(f"node-{i}" * 40) < 2**32 for i in range(50))


def reference_fnv1a_32(data: bytes) -> int:
    """FNV-1a as the reference C code writes it (the prime multiplication as shifts and
    adds), kept apart from the agent's: the oracle must not share its mistakes."""
    hval = 0x811C9DC5
    for octet in data:
        hval ^= octet
        hval += (hval << 1) + (hval << 4) + (hval << 7) + (hval << 8) + (hval << 24)
        hval &= 0xFFFFFFFF
    return hval


def test_the_reference_agrees_with_the_published_vectors() -> None:
    assert reference_fnv1a_32(b"") == 0x811C9DC5
    assert reference_fnv1a_32(b"a") == 0xE40C292C
    assert reference_fnv1a_32(b"foobar") == 0xBF9CF968


def test_owner_of_the_acceptance_node() -> None:
    assert shard_of("kwok-node-17", 7) == 4
    assert reference_fnv1a_32(b"kwok-node-17") % 7 == 4


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
        assert owners == [reference_fnv1a_32(node.encode()) % 4]


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
