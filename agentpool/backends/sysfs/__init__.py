"""Host control through sysfs: RAPL powercap zones and cpufreq policies."""
