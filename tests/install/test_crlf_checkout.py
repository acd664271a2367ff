"""A checkout made the way Git for Windows makes one (core.autocrlf=true) still sets Nalar up inside WSL.

Without .gitattributes such a clone gets CRLF in the shell scripts and the Makefile, and
`packaging/setup_venv.sh` fails with "/usr/bin/env: 'bash\\r'". The clone is of this branch's HEAD, what a
Windows user would get; the set-up runs for real through make and the scripts' shebangs, with a stand-in
venv python that records what it was asked to install instead of installing it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def windows_clone(into: Path) -> Path:
    git("clone", "-q", "-c", "core.autocrlf=true", str(ROOT), str(into))
    assert git("config", "core.autocrlf", cwd=into).strip() == "true"
    return into


def read_by_bash_or_make(clone: Path) -> list[Path]:
    found = []
    for name in git("ls-files", cwd=clone).splitlines():
        path = clone / name
        if path.name == "Makefile" or name.endswith(".sh") or path.read_bytes()[:2] == b"#!":
            found.append(path)
    return found


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield windows_clone(tmp_path_factory.mktemp("windows") / "nalar")


def test_a_windows_clone_keeps_lf_in_everything_bash_and_make_read(clone: Path) -> None:
    scripts = read_by_bash_or_make(clone)
    names = {str(path.relative_to(clone)) for path in scripts}
    assert {"Makefile", ".ci/run", "packaging/setup_venv.sh", "packaging/windows/inside_wsl.sh"} <= names
    assert [str(p.relative_to(clone)) for p in scripts if b"\r" in p.read_bytes()] == []
    # The clone did convert: the batch file, which cmd.exe reads, has CRLF.
    assert b"\r\n" in (clone / "packaging" / "windows" / "install.cmd").read_bytes()


def test_every_shell_script_in_a_windows_clone_parses(clone: Path) -> None:
    for script in read_by_bash_or_make(clone):
        first_line = script.read_bytes().split(b"\n", 1)[0]
        if script.name != "Makefile" and not (first_line.startswith(b"#!") and b"python" in first_line):
            result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
            assert result.returncode == 0, (script, result.stderr)


# setup_venv.sh hands pip's own settings to uv (a mirror, a wheel folder, a constraints file).
PIP_SETTINGS_READ = [f"-m pip config get global.{key}" for key in ("index-url", "extra-index-url", "find-links",
                                                                    "constraint")]


def stand_in_venv(folder: Path, calls: Path) -> Path:
    (folder / "bin").mkdir(parents=True)
    python = folder / "bin" / "python"
    python.write_text(f'#!/bin/bash\necho "$*" >> "{calls}"\n')
    python.chmod(0o755)
    return folder


def test_make_setup_runs_from_a_windows_clone(clone: Path, tmp_path: Path) -> None:
    """The command install.ps1 runs inside WSL (NALAR_ENGINE=gpu make setup), through the shebangs."""
    calls = tmp_path / "calls"
    venv = stand_in_venv(tmp_path / "venv", calls)
    env = {**os.environ, "NALAR_ENGINE": "gpu", "VENV": str(venv)}
    result = subprocess.run(["make", "-C", str(clone), "setup", f"VENV={venv}"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert calls.read_text().splitlines() == [
        *PIP_SETTINGS_READ,
        "-m pip install --quiet uv",  # the stand-in venv gets no uv, so pip installs instead
        "-m pip install -e .[gpu]",  # not --quiet: GBs of downloads must show progress (issue 25, bug 6)
        "-c import vllm, transformers; print('nalar: vllm', vllm.__version__, "
        "'· transformers', transformers.__version__)",
        "-m app.commands.doctor --gpu",  # the GPU engine's first-start checklist (issue 24)
        "-m app.core.models.embedded_model"]
    assert "bash\\r" not in result.stderr


def test_without_the_attributes_the_same_clone_fails_as_it_did(tmp_path: Path) -> None:
    """The control: the bug this file guards against is real, and this harness sees it."""
    clone = windows_clone(tmp_path / "nalar")
    git("rm", "-q", ".gitattributes", cwd=clone)  # from the index too: checkout falls back to the index's copy
    for name in git("ls-files", cwd=clone).splitlines():
        (clone / name).unlink()
    git("checkout", "-q", "--", ".", cwd=clone)  # checked out again, now under autocrlf alone
    assert b"\r\n" in (clone / "packaging" / "setup_venv.sh").read_bytes()
    venv = stand_in_venv(tmp_path / "venv", tmp_path / "calls")
    result = subprocess.run([str(clone / "packaging" / "setup_venv.sh")], env={**os.environ, "VENV": str(venv)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "bash\\r" in result.stderr  # env writes the name it lacks escaped


def test_the_working_trees_attributes_keep_scripts_lf() -> None:
    """Checks the attributes as they are now, committed or not (the clones above see HEAD)."""
    paths = ["Makefile", ".ci/run", "packaging/setup_venv.sh", "packaging/windows/inside_wsl.sh",
             "packaging/linux/install_desktop.sh", "app/commands/cli.py"]
    report = git("check-attr", "eol", "--", *paths, cwd=ROOT)
    assert report.splitlines() == [f"{path}: eol: lf" for path in paths]
    assert git("check-attr", "eol", "--", "packaging/windows/install.cmd", cwd=ROOT).strip().endswith("crlf")
    assert git("check-attr", "binary", "--", "resources/nalar.ico", cwd=ROOT).strip().endswith("set")


def old_clone_then_pull(into: Path) -> Path:
    """What a Windows user who cloned before .gitattributes existed has after `git pull`: Git for Windows
    (core.autocrlf=true) checked everything out with CRLF, and the fast-forward rewrote only the files that
    changed since, so the rest (the Makefile among them) keeps CRLF."""
    added = git("log", "--diff-filter=A", "--format=%H", "--", ".gitattributes", cwd=ROOT).split()
    if not added:
        pytest.skip("this clone's history doesn't reach the commit that added .gitattributes (a shallow clone)")
    head = git("rev-parse", "HEAD", cwd=ROOT).strip()
    git("clone", "-q", "--no-checkout", "-c", "core.autocrlf=true", str(ROOT), str(into))
    git("checkout", "-q", "-B", "main", f"{added[-1]}^", cwd=into)
    assert not (into / ".gitattributes").exists() and b"\r\n" in (into / "Makefile").read_bytes()
    git("merge", "-q", "--ff-only", head, cwd=into)  # the `git pull`
    return into


@pytest.mark.skipif(not shutil.which("rsync"), reason="rsync is not installed (make test installs it: "
                    "packaging/linux/system_packages.sh)")
def test_an_old_windows_clone_updated_by_git_pull_sets_up_after_the_installers_copy(tmp_path: Path) -> None:
    """Issue 25's bug 1, made for real: an old clone, fast-forwarded, still has CRLF in the files that didn't
    change, and `make setup` fails. inside_wsl.sh's copy (what install.ps1 runs) must leave a tree that sets up;
    a plain copy (the control) shows the failure is real."""
    clone = old_clone_then_pull(tmp_path / "windows" / "nalar")
    assert (clone / ".gitattributes").exists()
    crlf = sorted(str(p.relative_to(clone)) for p in read_by_bash_or_make(clone) if b"\r" in p.read_bytes())
    # Which files keep CRLF depends on what changed since (once the Makefile; now the desktop scripts).
    assert crlf, "the fast-forward rewrote every script: this clone no longer shows the bug"

    # The control: copied as they are, a CRLF script can't even start ("/usr/bin/env: 'bash\\r'").
    plain = tmp_path / "plain-copy"
    subprocess.run(["rsync", "-a", "--exclude", ".git", f"{clone}/", f"{plain}/"], check=True)
    script = next(name for name in crlf if name != "Makefile" and name.endswith(".sh"))
    (plain / script).chmod(0o755)
    failed = subprocess.run([str(plain / script)], capture_output=True, text=True, timeout=60)
    assert failed.returncode != 0 and "\\r" in failed.stderr, failed.stderr

    calls = tmp_path / "calls"
    venv = stand_in_venv(tmp_path / "venv", calls)
    env = {**os.environ, "NALAR_ENGINE": "gpu", "VENV": str(venv)}
    home = tmp_path / "home"
    home.mkdir()
    copied = subprocess.run(["bash", str(ROOT / "packaging" / "windows" / "inside_wsl.sh"), "copy"],
                            env={"HOME": str(home), "PATH": os.environ["PATH"], "NALAR_SOURCE": str(clone)},
                            capture_output=True, text=True, timeout=120)
    assert copied.returncode == 0, copied.stdout + copied.stderr
    assert f"Converted {len(crlf)} scripts" in copied.stdout
    installed = home / "nalar"
    assert [p for p in read_by_bash_or_make(installed) if b"\r" in p.read_bytes()] == []
    assert subprocess.run(["bash", "-n", str(installed / script)]).returncode == 0
    result = subprocess.run(["make", "-C", str(installed), "setup", f"VENV={venv}"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "-m pip install -e .[gpu]" in calls.read_text().splitlines()
