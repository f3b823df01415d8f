"""Host GPU power caps: NVML and AMD SMI through the vendors' own bindings."""
