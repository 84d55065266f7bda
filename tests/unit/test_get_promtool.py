"""scripts/get-promtool on a fresh machine, with apt-get, sudo and dpkg-deb replaced by fakes on PATH.

Case matrix: package lists present (one download) / missing (download fails, ``apt-get update``,
download again) / registry unreachable (fails fast with a clear message and exit 3, never hangs);
a second run reuses the cached binary without calling apt at all.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "get-promtool"

FAKE_APT = """#!/usr/bin/env bash
echo "apt-get $*" >> "$FAKE_LOG"
for arg in "$@"; do
  case "$arg" in
    update) [[ "$FAKE_MODE" == unreachable ]] && { echo "E: could not resolve deb.debian.org" >&2; exit 100; }
            touch "$FAKE_LISTS"; exit 0 ;;
    download) if [[ "$FAKE_MODE" == unreachable || ! -e "$FAKE_LISTS" ]]; then
                echo "E: Can't select candidate version from package prometheus" >&2; exit 100; fi
              echo deb > prometheus_2.42.0+ds-5_amd64.deb; exit 0 ;;
  esac
done
exit 0
"""
FAKE_DPKG = """#!/usr/bin/env bash
mkdir -p "$3/usr/bin"
printf '#!/bin/sh\\necho "promtool, version 2.42.0"\\n' > "$3/usr/bin/promtool"
chmod +x "$3/usr/bin/promtool"
"""
FAKE_SUDO = """#!/usr/bin/env bash
[[ "$1" == -n ]] && shift
exec "$@"
"""


def run(tmp_path: Path, mode: str, lists: bool) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        for name, text in (("apt-get", FAKE_APT), ("dpkg-deb", FAKE_DPKG), ("sudo", FAKE_SUDO)):
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
    if lists:
        (tmp_path / "lists").touch()
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FAKE_LOG": str(tmp_path / "apt.log"),
        "FAKE_LISTS": str(tmp_path / "lists"),
        "FAKE_MODE": mode,
        "GPUBUS_PROMTOOL_FORCE_DOWNLOAD": "1",
        "GPUBUS_APT_TIMEOUT_S": "30",
        "HOME": os.environ.get("HOME", "/tmp"),
    }
    return subprocess.run(
        [str(SCRIPT), str(tmp_path / "cache")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def apt_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "apt.log"
    return [line.split()[-1] for line in log.read_text().splitlines()] if log.exists() else []


def test_present_package_lists_need_one_download(tmp_path: Path) -> None:
    done = run(tmp_path, "ok", lists=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "cache" / "bin" / "promtool")
    assert apt_calls(tmp_path) == ["prometheus"]


def test_missing_package_lists_are_fetched_with_apt_get_update(tmp_path: Path) -> None:
    done = run(tmp_path, "ok", lists=False)
    assert done.returncode == 0, done.stderr
    assert apt_calls(tmp_path) == ["prometheus", "update", "prometheus"]
    assert "refreshing the package lists" in done.stderr


def test_an_unreachable_registry_fails_with_a_clear_message(tmp_path: Path) -> None:
    done = run(tmp_path, "unreachable", lists=False)
    assert done.returncode == 3 and done.stdout == ""
    assert "registry unreachable" in done.stderr
    assert not (tmp_path / "cache" / "bin" / "promtool").exists()


@pytest.mark.parametrize("lists", [True, False])
def test_a_cached_binary_is_reused_without_apt(tmp_path: Path, lists: bool) -> None:
    assert run(tmp_path, "ok", lists=lists).returncode == 0
    (tmp_path / "apt.log").unlink()
    done = run(tmp_path, "unreachable", lists=lists)
    assert done.returncode == 0 and apt_calls(tmp_path) == []
