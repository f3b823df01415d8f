"""Elastic-pool assignment (README: elastic pool): modulo over members, rendezvous, member order."""

from __future__ import annotations

import collections
import hashlib

import pytest

from agentpool.pool.assignment import (
    Assignment,
    fnv32a,
    member_order,
    owner_of,
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
