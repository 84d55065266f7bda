"""``python -m gpubus`` runs the CLI."""

from gpubus.cli import main

main()
