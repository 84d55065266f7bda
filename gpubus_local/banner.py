"""What ``gpubus up`` prints once everything is ready: where each part listens, and commands to try.

The commands must work as printed: they name the CLI the way this user can run it (``gpubus`` on
PATH, the ``scripts/gpubus`` wrapper they started, or this environment's own script), and the flags
that reach this stack (its data dir, its kubeconfig) when they are not the defaults. Pure functions.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

COMMAND_ENV = "GPUBUS_COMMAND"
"""Set by ``scripts/gpubus`` to the path it was called by, so the hints name the wrapper."""
EXAMPLE = Path("examples") / "pod-shared-memory.yaml"


def cli_command(environ: Mapping[str, str], on_path: str | None, executable: str) -> str:
    """How to run the gpubus CLI again from here: the wrapper that started us, else ``gpubus`` when
    PATH finds this environment's script, else that script's path, else ``python -m gpubus``."""
    wrapper = environ.get(COMMAND_ENV, "").strip()
    if wrapper:
        return shlex.quote(wrapper)
    script = Path(executable).parent / "gpubus"
    if on_path is not None and Path(on_path).resolve() == script.resolve():
        return "gpubus"
    if script.exists():
        return shlex.quote(str(script))
    return f"{shlex.quote(executable)} -m gpubus"


def example_path(cwd: Path, checkout: Path) -> str | None:
    """The example pod file as this user reaches it: relative in a checkout, else absolute; None without."""
    if (cwd / EXAMPLE).is_file():
        return str(EXAMPLE)
    if (checkout / EXAMPLE).is_file():
        return shlex.quote(str(checkout / EXAMPLE))
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Hints:
    """What the hints need to know of the stack and of the user's shell."""

    command: str
    data_dir: Path
    default_data_dir: Path
    kubeconfig: Path
    default_kubeconfig: Path
    example: str | None


def hint_lines(h: Hints) -> list[str]:
    k = shlex.quote(str(h.kubeconfig))
    kubeconfig = "" if h.kubeconfig == h.default_kubeconfig else f" --kubeconfig {k}"
    data_dir = "" if h.data_dir == h.default_data_dir else f" --data-dir {shlex.quote(str(h.data_dir))}"
    lines = [f"  {h.command} tap{data_dir}"]
    if h.example is not None:
        lines.append(f"  {h.command} submit {h.example} --count 20{kubeconfig}")
    lines += [f"  {h.command} get pods{kubeconfig}", f"  {h.command} snapshot{data_dir}",
              f"  kubectl --kubeconfig {k} get pods,nodes"]
    return lines
