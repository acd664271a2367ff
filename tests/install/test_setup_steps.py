"""packaging/step.sh, which makes each set-up step of `make run` and `make test` one line, run for real."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEP = ROOT / "packaging" / "step.sh"


def run_step(tmp_path: Path, what: str, script: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    log = tmp_path / "build" / "setup.log"
    result = subprocess.run(["bash", str(STEP), what, "bash", "-c", script], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "NALAR_SETUP_LOG": str(log)})
    return result, log


def test_a_steps_output_goes_to_the_log_and_the_terminal_sees_its_name_and_time(tmp_path: Path) -> None:
    """Bug caught: apt's progress and debconf lines (hundreds of them) fill the first screen of `make test`, so
    the user can't see which step is running or whether one failed."""
    chatter = "\n".join(f"Unpacking libfoo{i} ... debconf: unable to initialize frontend" for i in range(200))
    result, log = run_step(tmp_path, "system packages", f"cat <<'EOF'\n{chatter}\nEOF\necho to-stderr >&2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "nalar: system packages…"
    assert lines[1].startswith("nalar: system packages: done (") and len(lines) == 2
    assert result.stderr == ""
    logged = log.read_text()
    assert "libfoo199" in logged and "to-stderr" in logged and "system packages: bash -c" in logged


def test_a_failed_step_exits_with_its_code_and_shows_only_its_own_tail(tmp_path: Path) -> None:
    """Bug caught: a failing step is hidden in the log (the user sees "failed" and nothing to act on), or its
    exit code is lost and make goes on to the tests; or the tail shown is an earlier step's."""
    run_step(tmp_path, "first", "echo earlier-step-line")
    noise = "\n".join(f"line {i}" for i in range(100))
    result, log = run_step(tmp_path, "second", f"echo '{noise}'\necho 'E: Unable to locate package x' >&2\nexit 7")
    assert result.returncode == 7
    assert "nalar: second: failed (exit 7)" in result.stderr and str(log) in result.stderr
    assert "E: Unable to locate package x" in result.stderr
    assert "earlier-step-line" not in result.stderr and "line 0\n" not in result.stderr, "only the last 40 lines"
    assert "earlier-step-line" in log.read_text(), "the log keeps every step"


def test_make_names_each_set_up_step_through_the_wrapper() -> None:
    """Bug caught: a set-up command added to the Makefile bypasses the wrapper and prints its chatter again."""
    makefile = (ROOT / "Makefile").read_text()
    for command in ("packaging/linux/system_packages.sh run", "packaging/linux/system_packages.sh test",
                    "packaging/setup_venv.sh\n", "packaging/setup_venv.sh test", "-m app.core.models.embedded_model"):
        line = next(line for line in makefile.splitlines(keepends=True) if command in line and line[0] == "\t")
        assert line.lstrip("\t").startswith("@$(STEP) "), line


def test_uv_gets_pips_own_settings_and_pip_installs_when_uv_fails(tmp_path: Path) -> None:
    """setup_venv.sh installs with uv, which reads none of pip's settings. Bugs caught: a machine's mirror, wheel
    folder or constraints file (pip.conf) not handed to uv, so it resolves another torch or fails offline; a
    failing uv ending the set-up instead of pip installing the same packages."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    calls = tmp_path / "calls"
    settings = {"index-url": "https://mirror.example/simple", "extra-index-url": "file:///a file:///b",
                "find-links": "/wheels", "constraint": "/etc/caps.txt"}
    answers = "".join(f'  "-m pip config get global.{key}") echo "{value}" ;;\n' for key, value in settings.items())
    (venv / "bin" / "python").write_text(f'#!/bin/bash\necho "python $*" >> "{calls}"\ncase "$*" in\n{answers}esac\n')
    for uv_exit in (0, 3):
        (venv / "bin" / "uv").write_text(f'#!/bin/bash\necho "uv $*" >> "{calls}"\nexit {uv_exit}\n')
        for tool in ("python", "uv"):
            (venv / "bin" / tool).chmod(0o755)
        calls.write_text("")
        result = subprocess.run([str(ROOT / "packaging" / "setup_venv.sh")], capture_output=True, text=True,
                                env={"PATH": "/usr/bin:/bin", "VENV": str(venv), "NALAR_ENGINE": "cpu"}, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        lines = calls.read_text().splitlines()
        uv_line = next(line for line in lines if line.startswith("uv pip install"))
        for part in ("--default-index https://mirror.example/simple", "--extra-index-url file:///a",
                     "--extra-index-url file:///b", "--find-links /wheels", "--constraint /etc/caps.txt",
                     "--index-strategy unsafe-best-match", "--compile-bytecode", "-e .[cpu]"):
            assert part in uv_line, (part, uv_line)
        pip_installs = [line for line in lines if line.startswith("python -m pip install") and "-e .[" in line]
        if uv_exit == 0:
            assert pip_installs == []
        else:
            assert len(pip_installs) == 1 and pip_installs[0].endswith("-e .[cpu]")
            assert "pip installs them instead" in result.stdout
