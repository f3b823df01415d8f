"""sysfs-shaped RAPL/cpufreq trees (:mod:`.trees`) and what makes them behave (:mod:`.dynamics`).

Owns: the shapes of real machines' host files (two sockets, BIOS-locked
RAPL, AMD without writable limits), and energy counters that move.
"""
