"""What a node's hardware is: NFD and GPU labels, the host's sysfs and GPUs, the catalog,
the NodeHardware report.

Owns: reading the Node object's hints, discovering the host's RAPL zones and
cpufreq policies and, through NVML / AMD SMI, its GPUs (read only), Joulie's
hardware catalog, agentpool's own table of GPU board power, and the
NodeHardware ``status`` body.
Never: writes anywhere, decides a cap, or talks to Kubernetes (kube/ publishes).
"""
