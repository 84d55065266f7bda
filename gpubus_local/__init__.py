"""The local world: everything that brings up a GPU cluster on one machine, never part of the product.

``gpubus up`` and its process tree (:mod:`gpubus_local.stack`), the embedded NATS
(:mod:`gpubus_local.natsserver`, :mod:`gpubus_local.natscluster`), the dev TLS and per-node identity
files, and the stand-ins for the Kubernetes parts gpubus touches (:mod:`gpubus_local.sim`). Imports
run one way: this package uses ``shared``, ``services`` and ``gpubus``; they never import it
(import-linter contract). Its commands reach the ``gpubus`` CLI through the ``gpubus.commands``
entry point (:mod:`gpubus_local.cli`).
"""
