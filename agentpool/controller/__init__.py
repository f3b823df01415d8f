"""One node's control, tick by tick: plain values in, actions and a result out.

Owns: the node controller (orchestration: desired state, routing, RAPL first,
DVFS fallback), its CPU strategies (host, HTTP), the GPU controller, the DVFS
state machines, percent-of-max caps, stale desired state, and the ``joulie_*``
metrics a controller writes.
Never: talks to Kubernetes or knows which process runs it; imports nothing
from kube/, supervisor/, worker/ or sim/.
"""
