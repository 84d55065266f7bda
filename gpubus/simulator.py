"""Whether the simulated cluster behind ``gpubus up`` is installed (package ``gpubus_sim``).

The simulator is an optional extra (``pip install 'gpubus[sim]'``) and stays out of the production
image. The product never imports it (an import-linter contract): ``gpubus up`` runs it only as
child processes (``gpubus sim-control`` ...), whose commands :mod:`gpubus.cli` registers by name
from :data:`SIM_COMMANDS` when :func:`installed` says so.
"""

from __future__ import annotations

import importlib.util

SIM_PACKAGE = "gpubus_sim"
SIM_COMMANDS = "gpubus_sim.cli"
"""The module whose ``register(app)`` adds the simulator's process commands."""
NOT_INSTALLED = "the simulator is not installed: pip install 'gpubus[sim]'"


def installed() -> bool:
    """True when the ``gpubus_sim`` package can be imported."""
    return importlib.util.find_spec(SIM_PACKAGE) is not None
