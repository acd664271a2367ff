"""Benchmark commands run as child processes (`python -m app bench …`): their ending, their process group,
their plots, and a cancel mid-run. Shared by the FP8 benchmark's and the saturation sweep's tests."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from app.core.measure.job_lines import JobLine, parse_job_line

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def finish_bench(proc: subprocess.Popen[str], timeout: float = 900) -> tuple[str, str]:
    """Its stdout and stderr once it ends; its whole group is killed if it outlives ``timeout``."""
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def end_group(pgid: int) -> None:
    """SIGKILL a job's whole process group (EngineCore outlives a killed parent, vllm#55510); gone is fine."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_in_group(args: list[str], timeout: float, **options: object) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` for a command that starts an engine: in its own process group, and the whole group
    ends however the test goes (run's timeout kills only the child, leaving its EngineCore)."""
    proc = subprocess.Popen(args, start_new_session=True, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            **options)  # type: ignore[call-overload]
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        end_group(proc.pid)
        proc.wait(30)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def group_processes(pgid: int, grace_s: float = 15.0) -> list[str]:
    """Live processes still in the job's process group (EngineCore included) after ``grace_s``."""
    def members() -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            try:
                if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except (ProcessLookupError, psutil.Error):
                continue
        return found

    _, alive = psutil.wait_procs(members(), timeout=grace_s)
    return [f"{p.pid} {p.name()}" for p in alive if p.is_running()]


def is_png(path: Path) -> bool:
    import matplotlib.image

    return path.read_bytes()[:8] == PNG_MAGIC and matplotlib.image.imread(path).ndim == 3


@dataclass(frozen=True)
class Cancelled:
    """How a job ended after SIGTERM: its last job line, and how long the signal took to end it."""

    last: JobLine
    seconds: float
    stderr: str


def sigterm_once(proc: subprocess.Popen[str], measuring: Callable[[JobLine], bool]) -> Cancelled:
    """SIGTERM to the job alone once a progress line says it is ``measuring`` with a live EngineCore: the job must
    close its engine itself. Checks that the EngineCore and the whole process group end with it."""
    assert proc.stdout is not None
    try:
        for raw in proc.stdout:  # wait until the engine is up and measuring
            line = parse_job_line(raw)
            if line and line.event == "progress" and measuring(line):
                break
        else:
            pytest.fail(f"the job ended before measuring: {proc.stderr.read()[-2000:] if proc.stderr else ''}")
        engine_cores = [p for p in psutil.Process(proc.pid).children(recursive=True) if "EngineCore" in p.name()]
        assert engine_cores, "expected a running EngineCore to cancel"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=120)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines = [line for line in map(parse_job_line, rest.splitlines()) if line is not None]
    assert lines, err[-2000:]
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in engine_cores)
    assert group_processes(proc.pid) == []
    return Cancelled(lines[-1], took, err)
