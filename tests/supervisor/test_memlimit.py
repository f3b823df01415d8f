"""How many workers a memory limit holds, and what an elastic pool's caches take of it."""

from __future__ import annotations

from agentpool.supervisor.memlimit import MemoryBudget

MIB = 1 << 20


def test_the_limit_holds_the_fixed_part_and_a_share_per_worker() -> None:
    assert MemoryBudget(None).workers() is None
    assert MemoryBudget(None).describe() == "no memory limit"
    # The chart's advice for a pool pod of 110 nodes: 96 MiB + 3 MiB x 110.
    assert MemoryBudget(426 * MIB).workers() == 110
    assert MemoryBudget(95 * MIB).workers() == 0


def test_cached_nodes_of_an_elastic_pool_take_room_from_the_workers() -> None:
    alone = MemoryBudget(426 * MIB)
    cached = MemoryBudget(426 * MIB, cached_nodes=5000)
    assert cached.fixed_bytes() > alone.fixed_bytes()
    per_node = (cached.fixed_bytes() - alone.fixed_bytes()) / 5000
    workers = alone.workers()
    assert workers is not None
    assert cached.workers() == workers - -(-5000 * per_node // (3 * MIB))
    assert "5000 managed nodes cached" in cached.describe()
    assert "cached" not in alone.describe()
