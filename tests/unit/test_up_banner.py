"""The commands ``gpubus up`` suggests once it is up name a CLI this user can run, with the flags that
reach this stack.

Case matrix: the ``scripts/gpubus`` wrapper that started it (as called), ``gpubus`` when PATH finds
this environment's own script, that script's path when PATH finds none or another one, ``python -m
gpubus`` without a script; the example file relative in a checkout, absolute elsewhere, left out
without one; ``--data-dir`` and ``--kubeconfig`` only when not the defaults.
"""

from __future__ import annotations

from pathlib import Path

from gpubus_local.banner import EXAMPLE, Hints, cli_command, example_path, hint_lines


def venv(tmp_path: Path, *, script: bool = True) -> str:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").touch()
    if script:
        (bin_dir / "gpubus").touch()
    return str(bin_dir / "python")


def test_the_wrapper_that_started_up_is_named_as_it_was_called(tmp_path: Path) -> None:
    python = venv(tmp_path)
    assert cli_command({"GPUBUS_COMMAND": "scripts/gpubus"}, None, python) == "scripts/gpubus"
    assert cli_command({"GPUBUS_COMMAND": "/my dir/gpubus"}, None, python) == "'/my dir/gpubus'"


def test_gpubus_alone_only_when_path_finds_this_environments_script(tmp_path: Path) -> None:
    python = venv(tmp_path)
    script = str(Path(python).parent / "gpubus")
    assert cli_command({}, script, python) == "gpubus"
    other = tmp_path / "elsewhere" / "gpubus"
    assert cli_command({}, str(other), python) == script  # PATH finds another install's gpubus
    assert cli_command({}, None, python) == script


def test_without_a_script_the_module_is_run_by_this_interpreter(tmp_path: Path) -> None:
    python = venv(tmp_path, script=False)
    assert cli_command({}, None, python) == f"{python} -m gpubus"


def test_the_example_is_relative_in_a_checkout_absolute_elsewhere_else_left_out(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / EXAMPLE).parent.mkdir(parents=True)
    (checkout / EXAMPLE).touch()
    assert example_path(checkout, checkout) == "examples/pod-shared-memory.yaml"
    assert example_path(tmp_path, checkout) == str(checkout / EXAMPLE)
    assert example_path(tmp_path, tmp_path / "no-checkout") is None


def hints(data_dir: Path, kubeconfig: Path, example: str | None = "examples/p.yaml") -> Hints:
    return Hints(command="scripts/gpubus", data_dir=data_dir, default_data_dir=Path("/home/u/.gpubus/up"),
                 kubeconfig=kubeconfig, default_kubeconfig=Path("/home/u/.gpubus/up/kubeconfig"),
                 example=example)


def test_default_paths_need_no_flags() -> None:
    lines = hint_lines(hints(Path("/home/u/.gpubus/up"), Path("/home/u/.gpubus/up/kubeconfig")))
    assert lines == ["  scripts/gpubus tap", "  scripts/gpubus submit examples/p.yaml --count 20",
                     "  scripts/gpubus get pods", "  scripts/gpubus snapshot",
                     "  kubectl --kubeconfig /home/u/.gpubus/up/kubeconfig get pods,nodes"]


def test_other_paths_are_passed_quoted_and_no_example_means_no_submit() -> None:
    lines = hint_lines(hints(Path("/tmp/my up"), Path("/tmp/my up/kubeconfig"), example=None))
    assert lines == ["  scripts/gpubus tap --data-dir '/tmp/my up'",
                     "  scripts/gpubus get pods --kubeconfig '/tmp/my up/kubeconfig'",
                     "  scripts/gpubus snapshot --data-dir '/tmp/my up'",
                     "  kubectl --kubeconfig '/tmp/my up/kubeconfig' get pods,nodes"]
