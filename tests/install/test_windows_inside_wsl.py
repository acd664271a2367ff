"""The part of the Windows installer that runs inside WSL (packaging/windows/inside_wsl.sh), run for real.

WSL's own pieces are replaced by what they look like from inside a distro: /etc/os-release, the Windows
driver's /usr/lib/wsl/lib/nvidia-smi, WSLg's folder and X socket (a real Unix socket), dpkg's lock (a real
fcntl lock held by the test). Commands that can't run here (id as a fresh distro's root, apt-get, the
driver's nvidia-smi, an old python3) are small scripts first on PATH; rsync, bash and the app are real.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "packaging" / "windows" / "inside_wsl.sh"
RTX_3060 = "NVIDIA GeForce RTX 3060, 8.6"


class Distro:
    """A fake distro's file system and PATH in tmp, with a supported set-up until a test breaks it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home" / "jurgen"
        self.bin = root / "stub-bin"
        self.wsl_lib = root / "usr-lib-wsl-lib"
        self.wslg = root / "mnt-wslg"
        self.x11 = root / "x11-unix"
        self.os_release = root / "os-release"
        for folder in (self.home, self.bin, self.wsl_lib, self.wslg, self.x11):
            folder.mkdir(parents=True)
        self.x_server = socket.socket(socket.AF_UNIX)
        self.x_server.bind(str(self.x11 / "X0"))
        self.set_os("ubuntu", "22.04")
        self.stub("id", 'echo 1000')
        self.stub("python3", 'echo 3.10')
        self.stub("dpkg-query", "exit 1")  # no package matches
        self.set_free_gb(500)
        self.set_gpus(RTX_3060)
        self.env = {"HOME": str(self.home), "PATH": f"{self.bin}:/usr/bin:/bin", "DISPLAY": ":0",
                    "LANG": "C.UTF-8", "NALAR_OS_RELEASE": str(self.os_release), "NALAR_WSL_LIB": str(self.wsl_lib),
                    "NALAR_WSLG_DIR": str(self.wslg), "NALAR_X11_DIR": str(self.x11)}

    def stub(self, name: str, body: str, folder: Path | None = None) -> Path:
        path = (folder or self.bin) / name
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(0o755)
        return path

    def set_os(self, os_id: str, version: str) -> None:
        self.os_release.write_text(f'NAME="{os_id.title()}"\nID={os_id}\nVERSION_ID="{version}"\n')

    def set_free_gb(self, gb: int) -> None:
        """df -Pk as coreutils prints it, for the home folder's file system."""
        self.stub("df", f'[ "$1" = -Pk ] || exit 9\necho "Filesystem 1024-blocks Used Available Capacity Mounted on"\n'
                        f'echo "/dev/sdc 1055762868 9000000 {gb * 1000 * 1000} 2% /"')

    def set_gpus(self, *rows: str, code: int = 0) -> None:
        listing = "\\n".join(rows)
        self.stub("nvidia-smi", f'[ "$1" = --query-gpu=name,compute_cap ] || exit 9\n'
                                f'printf "{listing}\\n"\nexit {code}', self.wsl_lib)

    def run(self, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(SCRIPT), *args], env={**self.env, **env}, capture_output=True, text=True,
                              timeout=timeout)


@pytest.fixture
def distro(tmp_path: Path) -> Iterator[Distro]:
    made = Distro(tmp_path)
    yield made
    made.x_server.close()


def problem(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines() if line.startswith("nalar-"))
    assert lines.get("nalar-fix"), result.stdout
    return lines["nalar-problem"] + " | fix: " + lines["nalar-fix"]


# ---- check ----------------------------------------------------------------------------------------------

def said(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if re.match(r"nalar-[\w-]+=", line))


def test_check_passes_a_supported_setup_and_names_the_users_home(distro: Distro) -> None:
    result = distro.run("check")
    assert said(result) == {"nalar-engine": "gpu", "nalar-need-gb": "20", "nalar-home": str(distro.home)}
    assert "GPU: NVIDIA GeForce RTX 3060 (compute capability 8.6)" in result.stdout
    assert "nalar-warning" not in result.stdout


def test_check_stops_while_the_distro_has_no_user_yet(distro: Distro) -> None:
    distro.stub("id", 'echo 0')
    text = problem(distro.run("check"))
    assert "as root" in text and "Open Ubuntu once" in text and "create your user" in text


@pytest.mark.parametrize(("os_id", "version", "expected"), [
    ("ubuntu", "20.04", "this is Ubuntu 20.04; Nalar needs Ubuntu 22.04"),
    ("ubuntu", "21.10", "this is Ubuntu 21.10"),
    ("debian", "12", "'debian', not Ubuntu"),
])
def test_check_names_an_unsupported_distro(distro: Distro, os_id: str, version: str, expected: str) -> None:
    distro.set_os(os_id, version)
    assert expected in problem(distro.run("check"))


def test_check_accepts_newer_ubuntus_by_version_order_not_text(distro: Distro) -> None:
    distro.set_os("ubuntu", "24.10")
    distro.stub("python3", "echo 3.12")
    assert distro.run("check").returncode == 0


def test_check_refuses_pythons_older_than_310(distro: Distro) -> None:
    distro.stub("python3", "echo 3.8")  # 3.8 sorts after 3.10 as text: the comparison must be by version
    assert "python3 is 3.8; vLLM needs Python 3.10" in problem(distro.run("check"))


def test_check_needs_wslgs_x_socket_not_only_its_folder(distro: Distro) -> None:
    distro.x_server.close()
    (distro.x11 / "X0").unlink()
    (distro.x11 / "X0").write_text("")  # a plain file where the socket belongs
    assert "WSLg" in problem(distro.run("check"))
    assert "DISPLAY=''" in problem(distro.run("check", DISPLAY=""))


@pytest.mark.parametrize(("rows", "engine"), [
    (["NVIDIA GeForce GTX 1080 Ti, 6.1"], "cpu"),
    (["Quadro P4000, 6.1", "NVIDIA GeForce RTX 2060, 7.5"], "gpu"),
    (["NVIDIA GeForce RTX 4090, 8.9"], "gpu"),
])
def test_check_takes_the_gpu_engine_from_compute_capability_7_and_the_cpu_engine_below(
        distro: Distro, rows: list[str], engine: str) -> None:
    """Issue 25's bug 3: a GTX 10xx owner was told to use a CPU build the installer could not produce."""
    distro.set_gpus(*rows)
    result = distro.run("check")
    assert said(result)["nalar-engine"] == engine
    if engine == "cpu":
        assert "compute capability 7.0 or newer" in result.stdout and "It will be slow" in result.stdout
        assert said(result)["nalar-need-gb"] == "10"


def test_check_without_an_nvidia_card_takes_the_cpu_route_not_the_nvidia_driver(distro: Distro) -> None:
    """Issue 25's bug 3: AMD and Intel owners were told to install the NVIDIA driver and turned away. Without
    the Windows driver's nvidia-smi (or with one that sees no GPU) the install goes on with the CPU engine,
    saying it will be slow."""
    (distro.wsl_lib / "nvidia-smi").unlink()
    result = distro.run("check")
    assert said(result)["nalar-engine"] == "cpu"
    warnings = [line for line in result.stdout.splitlines() if line.startswith("nalar-warning: ")]
    assert any("No NVIDIA GPU reaches WSL" in line for line in warnings)
    assert any("CPU engine. It will be slow" in line and "Qwen3-0.6B" in line for line in warnings)
    assert "nalar-problem" not in result.stdout
    distro.set_gpus("No devices were found", code=6)
    result = distro.run("check")
    assert said(result)["nalar-engine"] == "cpu" and "sees no GPU it can describe: No devices" not in result.stdout
    assert "sees no GPU it can describe (No devices were found)" in result.stdout


def test_check_refuses_too_little_free_space_before_gb_of_downloads(distro: Distro) -> None:
    """Issue 25's bug 6: nothing checked free space; a full disk failed the set-up half-way through pip."""
    distro.set_free_gb(12)
    assert "only 12 GB are free in Ubuntu" in problem(distro.run("check")), "12 GB < 20 for the GPU engine"
    (distro.wsl_lib / "nvidia-smi").unlink()
    assert said(distro.run("check"))["nalar-need-gb"] == "10", "the CPU engine's 10 GB fit in 12"


def test_check_refuses_a_linux_nvidia_driver_inside_wsl_even_though_nvidia_smi_works(distro: Distro) -> None:
    distro.stub("dpkg-query", 'echo "nvidia-utils-535 install ok installed"; echo "nvidia-driver-535 deinstall ok '
                              'config-files"')
    text = problem(distro.run("check"))
    assert "Linux NVIDIA driver is installed inside WSL (nvidia-utils-535 )" in text and "apt-get purge" in text
    run_the_suggested_purge(distro, text)
    distro.stub("dpkg-query", "exit 1")
    distro.set_gpus(RTX_3060)
    shutil.copy(distro.wsl_lib / "nvidia-smi", distro.bin / "nvidia-smi")  # a /usr/bin/nvidia-smi, not WSL's
    assert f"({distro.bin}/nvidia-smi)" in problem(distro.run("check"))


def run_the_suggested_purge(distro: Distro, text: str) -> None:
    """Issue 25's bug 4: the fix quoted all three patterns as one argument, which apt can't find ("Unable to
    locate package"). The command is run as a user pastes it, through bash, with sudo and apt-get recording
    their arguments one per line."""
    command = re.search(r"Remove it in Ubuntu: (sudo apt-get purge .+?), then in Windows", text).group(1)
    calls = distro.root / "apt-args"
    distro.stub("sudo", '"$@"')
    distro.stub("apt-get", f'printf "%s\\n" "$@" > {calls}')
    subprocess.run(["bash", "-c", command], env=distro.env, check=True, cwd=distro.home)
    assert calls.read_text().splitlines() == ["purge", "nvidia-driver-*", "nvidia-utils-*", "libnvidia-compute-*"]


# ---- apt: waits for dpkg's lock ----------------------------------------------------------------------------

def wait_for(condition, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline and proc.poll() is None, f"gave up (exit code {proc.poll()})"
        try:
            proc.wait(timeout=0.05)  # the pause between looks, and an early exit ends the wait too
        except subprocess.TimeoutExpired:
            pass


def test_apt_waits_for_a_held_dpkg_lock_then_installs(distro: Distro, tmp_path: Path) -> None:
    distro.stub("id", "echo 0")
    (distro.bin / "python3").unlink()  # the lock probe is the real python3's fcntl
    calls = tmp_path / "apt-calls"
    distro.stub("apt-get", f'echo "$*" >> {calls}')
    lock_file, out = tmp_path / "lock-frontend", tmp_path / "out"
    lock_file.write_text("")
    with lock_file.open("r+") as held, out.open("w") as sink:
        fcntl.lockf(held, fcntl.LOCK_EX)  # as unattended-upgrades holds it on a first boot
        proc = subprocess.Popen(["bash", str(SCRIPT), "apt", "git", "rsync"], stdout=sink, stderr=subprocess.STDOUT,
                                env={**distro.env, "NALAR_APT_LOCKS": str(lock_file), "NALAR_LOCK_POLL_S": "0.1"})
        try:
            wait_for(lambda: "Waiting for Ubuntu's package manager" in out.read_text(), 30, proc)
            assert proc.poll() is None and not calls.exists(), "nothing runs apt while the lock is held"
            fcntl.lockf(held, fcntl.LOCK_UN)
            assert proc.wait(30) == 0, out.read_text()
        finally:
            proc.kill()
    assert calls.read_text().splitlines() == ["-o DPkg::Lock::Timeout=600 -q update",
                                              "-o DPkg::Lock::Timeout=600 -q install -y git rsync"]


def test_apt_gives_up_on_a_lock_that_stays_held_and_names_it(distro: Distro, tmp_path: Path) -> None:
    distro.stub("id", "echo 0")
    (distro.bin / "python3").unlink()
    distro.stub("apt-get", f"touch {tmp_path / 'apt-ran'}")
    lock_file = tmp_path / "lock"
    lock_file.write_text("")
    with lock_file.open("r+") as held:
        fcntl.lockf(held, fcntl.LOCK_EX)
        result = distro.run("apt", "git", NALAR_APT_LOCKS=str(lock_file), NALAR_LOCK_TIMEOUT_S="0.3",
                            NALAR_LOCK_POLL_S="0.1")
    assert f"stayed busy for 0.3 s ({lock_file} is held" in problem(result)
    assert not (tmp_path / "apt-ran").exists()


# ---- copy: the Windows folder, handed over in WSLENV -----------------------------------------------------

def make_checkout(folder: Path) -> Path:
    (folder / "app").mkdir(parents=True)
    (folder / "app" / "__main__.py").write_text("")
    (folder / "Makefile").write_text("setup:\n")
    (folder / ".venv").mkdir()
    (folder / ".venv" / "windows-venv").write_text("")
    return folder


@pytest.mark.parametrize("source", ["", "/", "\\\\nas\\share\\nalar", "relative/path"])
def test_copy_refuses_a_path_wsl_could_not_translate_and_copies_nothing(distro: Distro, source: str) -> None:
    text = problem(distro.run("copy", NALAR_SOURCE=source))
    assert "not visible inside WSL" in text and "local drive" in text
    assert not (distro.home / "nalar").exists()


@pytest.mark.skipif(not shutil.which("rsync"), reason="rsync is not installed (install.ps1 installs it in Ubuntu)")
def test_copy_handles_non_ascii_and_apostrophes_and_resumes(distro: Distro, tmp_path: Path) -> None:
    source = make_checkout(tmp_path / "mnt" / "c" / "Users" / "Jürgen O'Brien" / "Nalar main")
    (source / "stale.txt").write_text("")
    assert distro.run("copy", NALAR_SOURCE=str(source)).returncode == 0
    installed = distro.home / "nalar"
    assert (installed / "app" / "__main__.py").is_file() and (installed / "stale.txt").is_file()
    assert not (installed / ".venv").exists(), "the Windows side's venv is not copied"
    (installed / ".venv").mkdir()  # the Linux venv make setup built
    (source / "stale.txt").unlink()
    assert distro.run("copy", NALAR_SOURCE=str(source)).returncode == 0
    assert not (installed / "stale.txt").exists() and (installed / ".venv").is_dir()
    assert "not a Nalar checkout" in problem(distro.run("copy", NALAR_SOURCE=str(tmp_path / "mnt")))


# ---- the first window, the desktop entry, the shortcut's launch -------------------------------------------

def test_window_check_starts_the_real_app_once_in_throwaway_settings(distro: Distro) -> None:
    (distro.home / "nalar").symlink_to(ROOT)  # this checkout, with its venv
    result = distro.run("window-check", QT_QPA_PLATFORM="offscreen", timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "nalar: window shown" in result.stdout
    assert not (distro.home / ".config" / "nalar").exists(), "the user's first start keeps its welcome"


def test_window_check_fails_when_there_is_no_display(distro: Distro) -> None:
    (distro.home / "nalar").symlink_to(ROOT)
    result = distro.run("window-check", QT_QPA_PLATFORM="xcb", DISPLAY=":4711", timeout=180)
    assert "window could not open through WSLg" in problem(result)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_desktop_entry_goes_where_wslg_looks_with_a_png_icon_and_is_removed_checked(distro: Distro,
                                                                                  tmp_path: Path) -> None:
    """Besides the icon: NoDisplay=true, or WSLg adds its own "Nalar (Ubuntu)" to Windows' Start menu beside
    install.ps1's shortcut (issue 25's bug 7: users saw two)."""
    repo = tmp_path / "repo"
    (repo / "resources").mkdir(parents=True)
    shutil.copy(ROOT / "resources" / "nalar.svg", repo / "resources")
    (repo / ".venv").symlink_to(ROOT / ".venv")
    share = tmp_path / "usr-share"
    result = distro.run("desktop-entry", str(repo), NALAR_SYSTEM_DATA=str(share))
    assert result.returncode == 0, result.stdout + result.stderr
    entry, icon = share / "applications" / "nalar.desktop", share / "icons/hicolor/256x256/apps/nalar.png"
    assert png_size(icon) == (256, 256)
    lines = entry.read_text().splitlines()
    assert f'Exec=bash "{repo}/packaging/windows/inside_wsl.sh" launch' in lines and f"Icon={icon}" in lines
    assert "StartupWMClass=nalar" in lines and f"Path={repo}" in lines
    assert "NoDisplay=true" in lines, "hidden from WSLg's Start-menu list; the window keeps its icon"
    if shutil.which("desktop-file-validate"):
        check = subprocess.run(["desktop-file-validate", str(entry)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout
    removed = distro.run("remove-desktop-entry", NALAR_SYSTEM_DATA=str(share))
    assert removed.stdout.splitlines() == [f"removed {entry}", f"removed {icon}"]
    assert not entry.exists() and not icon.exists()


def test_launch_execs_the_app_from_the_install_dir_and_logs_its_output(distro: Distro) -> None:
    venv_bin = distro.home / "nalar" / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    distro.stub("python", 'echo "pid=$$ cwd=$PWD args=$* class=$RESOURCE_NAME"; echo "a Qt warning" >&2', venv_bin)
    proc = subprocess.Popen(["bash", str(SCRIPT), "launch"], env=distro.env)
    assert proc.wait(30) == 0
    log = (distro.home / ".local" / "state" / "nalar" / "wslg-launch.log").read_text()
    assert f"pid={proc.pid} cwd={distro.home}/nalar args=-m app class=nalar" in log, "exec: no shell stays behind"
    assert "a Qt warning" in log and "starting Nalar" in log


def test_uninstall_steps_remove_and_report_and_list_the_caches(distro: Distro) -> None:
    for folder in ("nalar", ".config/nalar", ".cache/pip/wheels", ".cache/vllm"):
        (distro.home / folder).mkdir(parents=True)
    (distro.home / ".cache/pip/wheels/big.whl").write_bytes(b"x" * 100_000)
    caches = distro.run("caches")
    assert [line.split()[0] for line in caches.stdout.splitlines()] == [
        f"nalar-cache={distro.home}/.cache/pip", f"nalar-cache={distro.home}/.cache/vllm"]
    assert distro.run("remove-files").stdout == f"removed {distro.home}/nalar\n"
    assert distro.run("remove-user-data").stdout == f"removed {distro.home}/.config/nalar\n"
    assert distro.run("remove-caches").returncode == 0
    assert os.listdir(distro.home / ".cache") == [] and distro.run("caches").stdout == ""


# ---- setup: the engine the check chose ------------------------------------------------------------------

@pytest.mark.parametrize("engine", ["gpu", "cpu"])
def test_setup_installs_the_engine_the_check_chose(distro: Distro, tmp_path: Path, engine: str) -> None:
    """Issue 25's bug 3: setup hardcoded NALAR_ENGINE=gpu, so a PC without a suitable NVIDIA card could not get
    the CPU engine. install.ps1 passes check's nalar-engine to setup; make sees it in NALAR_ENGINE."""
    calls = tmp_path / "make-calls"
    distro.stub("make", f'echo "NALAR_ENGINE=$NALAR_ENGINE $* in $PWD" >> {calls}')
    venv_bin = distro.home / "nalar" / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    distro.stub("python", "exit 0", venv_bin)  # nalar doctor
    result = distro.run("setup", engine)
    assert result.returncode == 0, result.stdout + result.stderr
    assert calls.read_text() == f"NALAR_ENGINE={engine} setup in {distro.home}/nalar\n"
    assert "setup needs the engine" in problem(distro.run("setup"))


# ---- copy: a Windows checkout's CRLF ---------------------------------------------------------------------

@pytest.mark.skipif(not shutil.which("rsync"), reason="rsync is not installed (install.ps1 installs it in Ubuntu)")
def test_copy_gives_what_bash_and_make_read_lf_and_leaves_the_rest(distro: Distro, tmp_path: Path) -> None:
    """Issue 25's bug 1 in small: CRLF scripts copied as they are make `make setup` fail with
    "/usr/bin/env: 'bash\\r'". Scripts, shebang files and the Makefile get LF; a batch file (cmd.exe needs CRLF)
    and data that holds CR on purpose are left alone. The real old-clone-then-pull case is in
    test_crlf_checkout.py."""
    source = make_checkout(tmp_path / "Nalar")
    (source / "Makefile").write_bytes(b"setup:\r\n\tpackaging/setup_venv.sh\r\n")
    (source / "packaging").mkdir()
    (source / "packaging" / "setup_venv.sh").write_bytes(b"#!/usr/bin/env bash\r\necho ok\r\n")
    (source / "run-me").write_bytes(b"#!/bin/sh\r\necho ok\r\n")
    (source / "install.cmd").write_bytes(b"@echo off\r\n")
    (source / "data.txt").write_bytes(b"a\r\nb\r\n")
    result = distro.run("copy", NALAR_SOURCE=str(source))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Converted 3 scripts from Windows line ends (CRLF) to LF" in result.stdout
    installed = distro.home / "nalar"
    assert (installed / "Makefile").read_bytes() == b"setup:\n\tpackaging/setup_venv.sh\n"
    assert (installed / "packaging" / "setup_venv.sh").read_bytes() == b"#!/usr/bin/env bash\necho ok\n"
    assert (installed / "run-me").read_bytes() == b"#!/bin/sh\necho ok\n"
    assert (installed / "install.cmd").read_bytes() == b"@echo off\r\n"
    assert (installed / "data.txt").read_bytes() == b"a\r\nb\r\n"
    again = distro.run("copy", NALAR_SOURCE=str(source))
    assert again.returncode == 0 and "Converted 3 scripts" in again.stdout, "rsync brings CRLF back: converted again"
