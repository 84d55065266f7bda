"""The monitor: what each container really uses on a node against what it was given.

Sources (HAMi-core shared regions, NVML, a simulator) feed a pure accounting core; the
results are served as HAMi-compatible Prometheus metrics and published as ``usage`` events.
"""
