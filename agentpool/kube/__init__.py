"""Kubernetes I/O: the only package that imports the ``kubernetes`` client.

Owns: the API client and its errors, informers, the status writer and every
status body, NodeHardware publishing, the API selection by discovery, and the
elastic pool's Leases and StatefulSet watch.
Never: decides what a node needs; everything above it works with plain dicts
(raw API JSON) and the agent's own errors.
"""
