"""A worker process: one node's controller, driven over its pipe; and the fork server.

Owns: the worker's main loop, the pipe protocol (shared with the supervisor),
the node's files (metrics, journal), the hook tests and benchmarks reach it by, and
:mod:`.forking` (the lean fork server every worker is forked from).
Never: imports the supervisor, Kubernetes I/O, click or the simulation kit (a
tool checks it): a worker carries only what it runs.
"""
