"""Which pod owns which node: static sharding, elastic membership, the handoff; pure logic.

Owns: fnv32a shards and rendezvous assignment, membership from Lease
records, the release-before-acquire handoff and one pod's composed state.
Never: I/O or clocks of its own (time is passed in), so every rule is tested
without a server.
"""
