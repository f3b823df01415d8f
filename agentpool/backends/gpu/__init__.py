"""Host GPU power caps through the vendors' own bindings: NVML, AMD SMI.

Owns: per-device limits, clamped caps, read-back and the journal of originals.
Never: imports a binding before it is needed (a node without GPUs loads neither).
"""
