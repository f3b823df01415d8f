"""The simulation kit: stand-ins for what cannot exist on a laptop or CI box.

Owns: :mod:`.apiserver` (a Kubernetes API emulator the real client talks
to), :mod:`.power` (the Joulie HTTP power simulator), :mod:`.sysfs`
(sysfs-shaped RAPL/cpufreq trees), :mod:`.envtest` (a real kube-apiserver
from envtest binaries), :mod:`.throttle` (a real process's forks made slow),
:mod:`.workerfaults` and :mod:`.memprobe` (worker hooks: faults that cannot be
had on demand, a worker's memory at each stage), and
:class:`~agentpool.sim.cluster.SimCluster` that ties them together for the
tests, the benchmarks and the demo.
Never: imports the agent's code (it stands in for the outside world, and an
oracle must not share the agent's mistakes); the agent never imports it.
Needs the ``sim`` extra (aiohttp).
"""
