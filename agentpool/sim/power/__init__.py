"""The power simulator: Joulie's HTTP telemetry/control endpoints over a power model.

Owns: the per-node power model (CPU and GPUs), the HTTP routes, the tell-it
API tests steer it with, and the record of every request.
"""
