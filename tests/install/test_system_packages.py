"""packaging/linux/system_packages.sh, the one place `make test` and `make run` get their Debian packages, run for real.

The script runs as a child process with PATH holding only test doubles for what would change the machine or
depends on who runs it: `id` (the user), `sudo` (with or without a password), `dpkg-query` (what is installed,
from a file) and `apt-get` (which records its call and marks the packages installed). Make, bash and env are real.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "packaging" / "linux" / "system_packages.sh"
# What .ci/run installed before the list moved into the script: none may be lost.
CI_PACKAGES = ("xvfb xdotool openbox wmctrl desktop-file-utils rsync libxcb-icccm4 libxcb-image0 libxcb-keysyms1 "
               "libxcb-render-util0 libxcb-xinerama0 libxcb-xkb1 libxkbcommon-x11-0 libxcb-randr0 libxcb-shape0 "
               "libxcb-cursor0 libegl1 fonts-dejavu-core libtcmalloc-minimal4").split()
TEST_TOOLS = {"xvfb", "xdotool", "openbox", "wmctrl", "desktop-file-utils", "rsync", "libtcmalloc-minimal4"}


def script_list(name: str) -> list[str]:
    found = re.search(rf"^{name}=\(([^)]*)\)", SCRIPT.read_text(), re.M)
    assert found, name
    return found.group(1).split()


class MachineDoubles:
    """PATH for the script: doubles of id, sudo, dpkg-query and apt-get, and the real env and bash."""

    def __init__(self, root: Path, uid: int, sudo: str | None, installed: list[str], apt_fails: bool = False) -> None:
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        self.calls = root / "calls"
        self.installed = root / "installed"
        self.installed.write_text("".join(f"{name}\n" for name in installed))
        self.write("id", f'[ "$1" = -u ] && echo {uid}')
        if sudo == "no password":
            self.write("sudo", f'echo "sudo $*" >> {self.calls}\n[ "$1" = -n ] && shift\nexec "$@"')
        elif sudo == "needs a password":
            self.write("sudo", f'echo "sudo $*" >> {self.calls}\necho "sudo: a password is required" >&2\nexit 1')
        self.write("dpkg-query", f'name="${{!#}}"\ngrep -qx "$name" {self.installed} || '
                                 f'{{ echo "dpkg-query: no packages found matching $name" >&2; exit 1; }}\n'
                                 'echo -n installed')
        apt = f'echo "apt-get $* DEBIAN_FRONTEND=$DEBIAN_FRONTEND" >> {self.calls}\n'
        if apt_fails:
            apt += 'echo "E: Unable to locate package" >&2\nexit 100'
        else:
            apt += (f'[ "$1" = install ] && for a in "$@"; do\n'
                    f'  case "$a" in install|-*) ;; *) echo "$a" >> {self.installed};; esac\ndone\ntrue')
        self.write("apt-get", apt)
        # The coreutils packaging/step.sh uses to log each step: real, and changing nothing outside tmp_path.
        for real in ("env", "bash", "make", "grep", "sh", "true", "date", "mkdir", "wc", "tail", "tr", "sleep"):
            found = shutil.which(real)
            assert found, real
            (self.bin / real).symlink_to(found)

    def write(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text(f"#!{shutil.which('bash')}\n# test double of {name}\n{body}\n")
        path.chmod(0o755)

    def env(self) -> dict[str, str]:
        return {"PATH": str(self.bin), "HOME": str(self.bin.parent), "LANG": "C.UTF-8"}

    def run(self, mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin / "bash"), str(SCRIPT), mode], env=self.env(), capture_output=True,
                              text=True, timeout=60)

    def call_lines(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


def all_packages() -> list[str]:
    return script_list("qt") + script_list("tests")


def test_the_lists_keep_every_package_ci_installed_and_split_them_by_target() -> None:
    """Bug caught: moving the list out of .ci/run drops a package (say rsync or openbox), and the tests that need
    it skip on a fresh machine while CI, whose image happens to have it, stays green."""
    assert set(CI_PACKAGES) <= set(all_packages())
    assert set(script_list("tests")) == TEST_TOOLS
    assert not TEST_TOOLS & set(script_list("qt")), "make run installs no test tools"
    assert "libgl1" in script_list("qt"), "Qt's xcb plugin links libGL.so.1"


def test_as_root_it_installs_only_the_missing_packages_then_exits_0(tmp_path: Path) -> None:
    """Bug caught: the script reinstalls everything, or installs nothing and lets the tests skip, or prompts
    (no DEBIAN_FRONTEND=noninteractive) in the middle of make."""
    present = [name for name in all_packages() if name not in ("rsync", "openbox")]
    machine = MachineDoubles(tmp_path, uid=0, sudo=None, installed=present)
    result = machine.run("test")
    assert result.returncode == 0, result.stdout + result.stderr
    assert machine.call_lines() == ["apt-get update -qq DEBIAN_FRONTEND=noninteractive",
                                    "apt-get install -y -qq openbox rsync DEBIAN_FRONTEND=noninteractive"]
    assert "openbox rsync" in result.stdout


def test_with_sudo_n_it_installs_through_sudo(tmp_path: Path) -> None:
    """Bug caught: a user with passwordless sudo (a CI runner, a dev box) is told to run the command by hand,
    or apt-get runs without sudo and fails on the lock."""
    machine = MachineDoubles(tmp_path, uid=1000, sudo="no password", installed=script_list("qt"))
    result = machine.run("test")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = machine.call_lines()
    assert lines[0] == "sudo -n true"
    assert lines[1:3] == ["sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update -qq",
                          "apt-get update -qq DEBIAN_FRONTEND=noninteractive"]
    assert lines[3].startswith("sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ")
    assert set(lines[4].split()) >= TEST_TOOLS


def test_without_root_or_sudo_n_it_stops_and_names_the_one_command(tmp_path: Path) -> None:
    """Bug caught: without root the script runs apt-get anyway (a password prompt or a lock error mid-make),
    or carries on and the tests skip by the dozen; the user must get one command naming the missing packages."""
    machine = MachineDoubles(tmp_path, uid=1000, sudo="needs a password",
                             installed=[name for name in all_packages() if name != "xdotool"])
    result = machine.run("test")
    assert result.returncode == 1
    assert machine.call_lines() == ["sudo -n true"], "asked sudo without a prompt, ran no apt-get"
    assert "  sudo apt-get install -y xdotool\n" in result.stderr
    assert "then make test again" in result.stderr


def test_without_sudo_at_all_it_stops_the_same_way(tmp_path: Path) -> None:
    """Bug caught: a machine with no sudo binary (a minimal container's user) makes the script die on
    "sudo: command not found" instead of naming the command."""
    machine = MachineDoubles(tmp_path, uid=1000, sudo=None, installed=[])
    result = machine.run("run")
    assert result.returncode == 1 and machine.call_lines() == []
    assert f"  sudo apt-get install -y {' '.join(script_list('qt'))}\n" in result.stderr
    assert "Qt's xcb platform plugin" in result.stderr and "then make run again" in result.stderr


@pytest.mark.parametrize("uid", [0, 1000])
def test_with_everything_installed_it_asks_nothing(tmp_path: Path, uid: int) -> None:
    """Bug caught: every `make test` runs apt-get update (slow, needs the network) or asks sudo although nothing
    is missing."""
    machine = MachineDoubles(tmp_path, uid=uid, sudo="needs a password", installed=all_packages())
    result = machine.run("test")
    assert (result.returncode, result.stdout, result.stderr, machine.call_lines()) == (0, "", "", [])


def test_run_checks_only_the_qt_libraries(tmp_path: Path) -> None:
    """Bug caught: `make run` wants the test tools (Xvfb, openbox, ...) installed, or checks nothing and the user
    meets Qt's "could not load the Qt platform plugin "xcb"" instead of the missing library's name."""
    machine = MachineDoubles(tmp_path, uid=1000, sudo="needs a password", installed=script_list("qt"))
    assert machine.run("run").returncode == 0
    missing_cursor = MachineDoubles(tmp_path / "b", uid=1000, sudo="needs a password",
                                    installed=[n for n in script_list("qt") if n != "libxcb-cursor0"])
    result = missing_cursor.run("run")
    assert result.returncode == 1 and "  sudo apt-get install -y libxcb-cursor0\n" in result.stderr


def test_a_failing_apt_get_stops_with_its_command(tmp_path: Path) -> None:
    """Bug caught: apt-get fails (offline, a package renamed) and the script exits 0, so the tests then skip."""
    machine = MachineDoubles(tmp_path, uid=0, sudo=None, installed=[], apt_fails=True)
    result = machine.run("test")
    assert result.returncode == 1
    assert "apt-get could not install" in result.stderr and "sudo apt-get install -y" in result.stderr


def test_without_apt_it_names_the_packages_and_lets_the_tests_skip(tmp_path: Path) -> None:
    """Bug caught: on a distribution without apt-get the script fails with "command not found" (or tries yum)."""
    machine = MachineDoubles(tmp_path, uid=0, sudo=None, installed=[])
    (machine.bin / "apt-get").unlink()
    (machine.bin / "dpkg-query").unlink()
    result = machine.run("test")
    assert result.returncode == 0 and "no dpkg/apt-get here" in result.stdout and "rsync" in result.stdout


def test_make_test_stops_before_the_set_up_and_the_tests_when_packages_cant_be_installed(tmp_path: Path) -> None:
    """Bug caught: the Makefile doesn't run the script (or runs it after the tests, or ignores its exit), so
    `make test` on a fresh machine as a user goes on and fails or skips instead of naming the command."""
    machine = MachineDoubles(tmp_path, uid=1000, sudo="needs a password", installed=[])
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    asked = tmp_path / "venv-python-calls"
    (venv / "bin" / "python").write_text(f'#!/bin/sh\necho "$*" >> {asked}\n')
    (venv / "bin" / "python").chmod(0o755)
    result = subprocess.run(["make", "-C", str(ROOT), "test", f"VENV={venv}"], env=machine.env(),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "sudo apt-get install -y" in result.stderr and "then make test again" in result.stderr
    assert not asked.exists(), "no set-up and no tests ran"


def test_make_run_and_make_test_call_the_script_first_and_ci_only_calls_make_test() -> None:
    """Bug caught: `make run` goes on to Qt without the check, or .ci/run keeps its own package step, so CI
    passes on packages a user's `make test` never installs."""
    env = {**os.environ, "VENV": "/nonexistent-venv"}
    for target, mode, last in (("run", "run", "-m app"), ("test", "test", "-m pytest")):
        plan = subprocess.run(["make", "-n", "-C", str(ROOT), target, "VENV=/nonexistent-venv"], env=env,
                              capture_output=True, text=True, timeout=60).stdout.splitlines()
        first = next(i for i, line in enumerate(plan) if f"packaging/linux/system_packages.sh {mode}" in line)
        assert first < next(i for i, line in enumerate(plan) if "setup_venv.sh" in line)
        assert first < next(i for i, line in enumerate(plan) if last in line)
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci == ["set -euo pipefail", 'cd "$(dirname "$0")/.."', "make test"]


def test_readme_says_what_make_test_installs() -> None:
    """Bug caught: the README's `make test` promises a set-up that leaves the desktop tools out, unsaid."""
    readme = (ROOT / "README.md").read_text()
    assert "packaging/linux/system_packages.sh" in readme
    for name in TEST_TOOLS | {"libxcb-cursor0"}:
        assert name in readme, name


def test_the_rsync_test_skips_with_its_reason_when_rsync_is_absent(tmp_path: Path) -> None:
    """Bug caught: test_crlf_checkout's old-clone test called rsync unconditionally and failed (not skipped) on
    a fresh machine without it. Run for real, in a child pytest whose PATH has everything but rsync."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for entry in os.scandir(folder):
            if entry.name != "rsync" and not (bin_dir / entry.name).exists():
                (bin_dir / entry.name).symlink_to(entry.path)
    assert shutil.which("rsync", path=str(bin_dir)) is None
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist",
         "tests/install/test_crlf_checkout.py", "-k", "old_windows_clone"],
        cwd=ROOT, env={**os.environ, "PATH": str(bin_dir)}, capture_output=True, text=True, timeout=300)
    assert "1 skipped" in result.stdout and "rsync is not installed" in result.stdout, result.stdout[-3000:]
