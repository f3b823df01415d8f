"""Which pod owns which node: static sharding, elastic membership, handoff; pure logic."""
