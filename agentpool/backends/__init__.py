"""The ways to act on a node: host sysfs, host GPUs, and the Joulie HTTP protocol.

Owns: :mod:`.sysfs` (RAPL PL1, cpufreq), :mod:`.gpu` (NVML, AMD SMI), the
HTTP transport (:mod:`.httpclient`, :mod:`.httpauth`), the CPU and GPU
sides of the protocol (:mod:`.cpu_http`, :mod:`.gpu_http`) and how a GPU cap
lands on one device (:mod:`.gpucaps`). Every failure becomes one of the
agent's errors naming the path or URL.
Never: decides the desired state (the controller does), or imports the controller,
Kubernetes I/O or the supervisor.
"""
