"""sysfs-shaped RAPL/cpufreq trees for tests and the simulator, and their dynamics."""
