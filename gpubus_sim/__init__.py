"""The simulated cluster behind ``gpubus up``: stand-ins for the Kubernetes parts gpubus touches.

An API server, kube-scheduler, kubelets and node drivers that speak the real protocols, for tests,
demos and benchmarks. An optional extra (``pip install 'gpubus[sim]'``), not part of the product:
``shared``, ``services`` and ``gpubus`` never import it (import-linter contract). Frozen at today's
kubectl fidelity: it grows only where the product needs it.
"""
