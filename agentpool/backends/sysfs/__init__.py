"""Host control through sysfs: RAPL powercap zones, cpufreq policies, and their files.

Owns: finding the package zones and policies under ``SYSFS_ROOT``, writing
limits, reading energy, and journaling the values found before the first write.
Never: writes outside the sysfs root it is given.
"""
