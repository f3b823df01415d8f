"""Control and telemetry backends: host sysfs (RAPL, cpufreq) and HTTP."""
