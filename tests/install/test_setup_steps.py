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
