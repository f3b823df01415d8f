"""The simulation kit: stand-ins for what cannot exist on a laptop or CI box.

- :mod:`agentpool.sim.apiserver`: a Kubernetes API emulator the real client talks to.
- :mod:`agentpool.sim.power.server`: an HTTP power simulator speaking the Joulie control protocol.
- :mod:`agentpool.sim.sysfs.trees`: builders of sysfs-shaped trees (RAPL powercap, cpufreq).

Needs the ``sim`` extra (aiohttp).
"""
