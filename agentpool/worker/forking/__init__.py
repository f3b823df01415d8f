"""The lean fork server every worker is forked from: its loop, wire format, preload, warm-up.

Owns: a fresh interpreter that imports only what a worker runs, warms it
(every tick path once), freezes and immortalizes its heap, then forks.
Never: imports the Kubernetes client or starts a thread a worker would inherit.
"""
