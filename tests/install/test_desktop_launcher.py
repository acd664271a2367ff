"""The Linux launcher: install_desktop.sh writes a valid .desktop entry and icon, its Exec line starts the
real app under Xvfb (first run, embedded model), SIGTERM closes it with nothing left behind, and
uninstall_desktop.sh removes what was installed."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from app.core.settings import paths
from tests.conftest import end_processes, process_family, require_embedded_model, started_under
from tests.real.test_faults_real import xvfb_display  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "packaging" / "linux" / "install_desktop.sh"
UNINSTALL = ROOT / "packaging" / "linux" / "uninstall_desktop.sh"


def data_home() -> Path:
    return Path(os.environ["XDG_DATA_HOME"])  # the test's own tmp dir (conftest's isolated_dirs)


def launcher() -> Path:
    return data_home() / "applications" / "nalar.desktop"


def icon() -> Path:
    return data_home() / "icons" / "hicolor" / "scalable" / "apps" / "nalar.svg"


def install() -> subprocess.CompletedProcess:
    return subprocess.run([str(INSTALL)], capture_output=True, text=True, timeout=60, check=True)


def entry() -> dict[str, str]:
    lines = launcher().read_text().splitlines()
    assert lines[0] == "[Desktop Entry]"
    return dict(line.split("=", 1) for line in lines[1:] if "=" in line)


def test_install_writes_a_valid_launcher_and_icon_and_uninstall_removes_them() -> None:
    result = install()
    assert str(launcher()) in result.stdout
    assert icon().read_bytes() == (ROOT / "resources" / "nalar.svg").read_bytes()
    fields = entry()
    assert fields["Name"] == "Nalar" and fields["Icon"] == "nalar" and fields["Terminal"] == "false"
    assert shlex.split(fields["Exec"]) == [str(ROOT / ".venv" / "bin" / "python"), "-m", "app"]
    assert fields["Path"] == str(ROOT)
    validator = shutil.which("desktop-file-validate")
    if validator is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install desktop-file-utils (make test does: packaging/linux/system_packages.sh)")
        pytest.skip("desktop-file-validate is not installed (apt install desktop-file-utils)")
    check = subprocess.run([validator, str(launcher())], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0 and "error" not in check.stdout + check.stderr, check.stdout + check.stderr

    install()  # again: idempotent, same content
    assert shlex.split(entry()["Exec"])[0] == str(ROOT / ".venv" / "bin" / "python")
    removed = subprocess.run([str(UNINSTALL)], capture_output=True, text=True, timeout=60, check=True)
    assert not launcher().exists() and not icon().exists()
    assert removed.stdout.count("removed") == 2
    again = subprocess.run([str(UNINSTALL)], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout == "", "nothing left to remove is not an error"


def test_install_refuses_without_a_venv(tmp_path: Path) -> None:
    copy = tmp_path / "checkout"
    (copy / "packaging" / "linux").mkdir(parents=True)
    shutil.copy(INSTALL, copy / "packaging" / "linux")
    result = subprocess.run([str(copy / "packaging" / "linux" / "install_desktop.sh")], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1 and "run 'make setup'" in result.stderr
    assert not launcher().exists()


def _wait_for(condition, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}; the app printed:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)  # ok-sleep: polling another process's files and windows; no signal crosses processes


@pytest.mark.real_engine
def test_the_launchers_exec_line_starts_nalar_and_sigterm_leaves_nothing(xvfb_display: str,  # noqa: F811
                                                                          tmp_path: Path) -> None:
    require_embedded_model()
    install()
    fields = entry()
    # As a desktop would: the Exec line, in the Path folder, without this test's PYTHONPATH. Fresh XDG dirs and no
    # settings file: a first run, so the welcome dialog opens (on a CPU-only machine too); closed with Escape
    # ("Later"), the embedded model starts. The dialog's hub check goes to a port nothing listens on.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QT_QPA_PLATFORM")}
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        env.update(DISPLAY=xvfb_display, HF_ENDPOINT=f"http://127.0.0.1:{unused.getsockname()[1]}")
    output = tmp_path / "app-output.log"
    app = subprocess.Popen(shlex.split(fields["Exec"]), cwd=fields["Path"], env=env, stdout=output.open("wb"),
                           stderr=subprocess.STDOUT)
    try:
        found = subprocess.run(["xdotool", "search", "--sync", "--onlyvisible", "--name", "^Nalar$"],
                               env=env, capture_output=True, text=True, timeout=120)
        assert found.returncode == 0, output.read_text()[-3000:]
        window_id = found.stdout.split()[0]
        wm_class = subprocess.run(["xprop", "-id", window_id, "WM_CLASS"], env=env, capture_output=True,
                                  text=True, timeout=30).stdout if shutil.which("xprop") else ""
        if wm_class:  # the launcher's StartupWMClass must match, or docks show a second, iconless entry
            assert f'"{fields["StartupWMClass"]}"' in wm_class.lower(), wm_class
        welcome = subprocess.run(["xdotool", "search", "--sync", "--onlyvisible", "--name", "^Welcome to Nalar$"],
                                 env=env, capture_output=True, text=True, timeout=120)
        assert welcome.returncode == 0, output.read_text()[-3000:]
        subprocess.run(["xdotool", "windowfocus", "--sync", welcome.stdout.split()[0]], env=env, check=True,
                       timeout=30)
        subprocess.run(["xdotool", "key", "Escape"], env=env, check=True, timeout=30)
        log_file = paths.log_dir() / "nalar.log"
        _wait_for(lambda: log_file.exists() and "engine ready:" in log_file.read_text(), 300, "the engine",
                  output)
        family = [(p.pid, p.create_time()) for p in psutil.Process(app.pid).children(recursive=True)]
        assert any(psutil.Process(pid).name() == "VLLM::EngineCore" for pid, _ in family)
        assert (paths.config_dir() / "settings.json").exists(), "the first run saved its settings"
        app.send_signal(signal.SIGTERM)  # what closing the window does; a desktop's logout sends the same
        assert app.wait(60) == 0
    finally:
        # Failed before its orderly close, or crashed: end it and its engine, which outlives it (re-parented,
        # so found by this test's own XDG dir when the app is gone).
        marks = process_family(app.pid) if app.poll() is None else []
        left = end_processes(marks + started_under(Path(os.environ["XDG_CONFIG_HOME"])))
        app.wait(30)
        assert left == [], f"could not end {left}"
    leftovers = []
    for pid, created in family:
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                leftovers.append(proc)
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(leftovers, timeout=15)
    assert alive == [], f"processes left behind: {alive}"
