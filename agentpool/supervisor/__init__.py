"""The parent process: watch the cluster, run one worker per owned node, serve /metrics.

Owns: the wiring and the main loop, the view of the cluster (:mod:`.clusterview`:
which nodes this pod owns and what each needs), worker handles and restarts, the
statuses it writes itself, the elastic pool's lease I/O, the merged ``/metrics``,
probes, and PID 1 duty.
Never: acts on a host or an endpoint itself (its workers do), or blocks its loop.
"""
