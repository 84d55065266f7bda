"""Usage sources: HAMi-core shared regions, NVML, and the simulator (see :class:`UsageSource`)."""
