"""The simulated cluster behind ``gpubus up``: stand-ins for the Kubernetes parts gpubus touches.

An API server, kube-scheduler, kubelets and node drivers that speak the real protocols, for tests,
demos and benchmarks. Part of the local world (:mod:`gpubus_local`), not of the product. Frozen at
today's kubectl fidelity: it grows only where the product needs it.
"""
