"""Measure FP8…: the benchmark, the saturation sweep, the KV quality check and calibration, run as
child jobs (app/ui/dialogs/job_panel.py). Closing the dialog cancels what runs. The benchmark and the
sweep need the machine to themselves: the chat engine is stopped before them and started again after.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QCloseEvent, QPixmap
from PySide6.QtWidgets import (
    QDialog,
    QLabel,
    QPushButton,
    QScrollArea,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.measure import fp8_bench, kv_quality_report
from app.core.measure.fp8_bench import Fp8Report
from app.core.measure.kv_quality import Advice
from app.core.measure.kv_quality_report import Calibration, QualityCheck, advice_text
from app.core.measure.kv_quality_report import table_rows as quality_rows
from app.ui.dialogs.job_panel import CANCEL_GRACE_S, JobPanel, JobProcess, app_command, fill_table, report_table
from app.ui.dialogs.saturation_tab import SaturationTab

if TYPE_CHECKING:
    from app.ui.controllers.chat_session import ChatSession
    from app.ui.controllers.engine_controller import EngineController

__all__ = ["CANCEL_GRACE_S", "JobPanel", "JobProcess", "MeasureDialog", "app_command"]


class MeasureDialog(QDialog):
    """Engine → Measure FP8…: Benchmark, Quality check and Calibration tabs."""

    def __init__(self, controller: EngineController, session: ChatSession,
                 show_profile: Callable[[dict[str, Any]], None], parent: QWidget | None = None) -> None:
        """``controller`` pauses the chat engine for a benchmark and applies settings; ``session`` says whether
        a reply streams; ``show_profile`` shows a measured saturation profile (the gauges)."""
        super().__init__(parent)
        self.controller = controller
        self.session = session
        self._show_profile = show_profile
        self.setWindowTitle("Measure FP8")
        self.setModal(False)
        self.resize(900, 700)
        self.tabs = QTabWidget()
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        self._restart_chat_after_bench = False
        self._build_bench_tab()
        self.saturation = SaturationTab(self._model_args)
        self.saturation.panel.before_run = lambda: self._stop_chat_engine(self.saturation.panel)
        self.saturation.panel.after_run = self._restart_chat_engine
        self.saturation.panel.running_changed.connect(self._bench_running)
        self.saturation.panel.result_ready.connect(self._profile_measured)
        self.tabs.addTab(self.saturation, "Saturation")
        self._build_quality_tab()
        self._build_calibration_tab()

    def _model_args(self) -> list[str]:
        model = self.controller.settings.engine.model
        return ["--model", model] if model else []

    # ---- benchmark ---------------------------------------------------------------------------

    def _build_bench_tab(self) -> None:
        self.bench = JobPanel(
            "Runs the configured model with KV cache dtype auto, then fp8 where this machine supports it: time "
            "to first token, ms/token at several context depths, KV capacity, and the bandwidth floor. "
            "The chat engine is stopped while it runs (the benchmark needs the memory and an idle machine) "
            "and started again afterwards.",
            lambda: app_command("bench", "--progress-jsonl"))
        self.bench.before_run = lambda: self._stop_chat_engine(self.bench)
        self.bench.after_run = self._restart_chat_engine
        self.bench_summary = QLabel("")
        self.bench_summary.setWordWrap(True)
        self.bench_summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.bench_table = report_table(fp8_bench.HEADERS)
        self.bench_plot = QLabel()
        self.bench_plot.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.bench_saved = QLabel("")
        self.bench_saved.setWordWrap(True)
        self.bench_saved.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        results = QWidget()
        inner = QVBoxLayout(results)
        for widget in (self.bench_summary, self.bench_table, self.bench_plot, self.bench_saved):
            inner.addWidget(widget)
        self.bench_table.setMinimumHeight(180)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(results)
        self.bench.body.addWidget(scroll)
        self.bench.result_ready.connect(self.show_bench)
        self.bench.running_changed.connect(self._bench_running)
        self.tabs.addTab(self.bench, "Benchmark")

    async def _stop_chat_engine(self, panel: JobPanel) -> bool:
        if self.session.streaming:
            panel.show_error("A reply is streaming.", "Stop it (or wait for it), then run the benchmark.")
            return False
        if any(other.running for other in (self.bench, self.saturation.panel) if other is not panel):
            panel.show_error("The other benchmark is running.", "Wait for it (or cancel it), then run this one.")
            return False
        self._restart_chat_after_bench = self.controller.running
        if self._restart_chat_after_bench:
            panel.step_label.setText("stopping the chat engine…")
        await self.controller.pause()
        return True

    def _restart_chat_engine(self) -> None:
        if self._restart_chat_after_bench:
            self._restart_chat_after_bench = False
            self.controller.resume()

    def _bench_running(self, running: bool) -> None:
        # Applying a setting restarts the chat engine: not while a benchmark has the machine.
        self.use_dtype_button.setEnabled(not running and self._quality_advice is not None)
        self.use_calibrated_button.setEnabled(not running and self._calibrated_model is not None)

    @property
    def benchmark_running(self) -> bool:
        return self.bench.running or self.saturation.panel.running

    def _profile_measured(self, report: dict[str, Any]) -> None:
        self._show_profile(report)

    def show_bench(self, data: dict[str, Any]) -> None:
        report = Fp8Report.from_dict(data)
        rows = fp8_bench.table_rows(report)
        fill_table(self.bench_table, rows)
        table = self.bench_table  # every row shown: the scroll area scrolls, not the table
        rows_height = sum(table.rowHeight(r) for r in range(len(rows)))
        table.setMinimumHeight(table.horizontalHeader().height() + rows_height + 6)
        self.bench_summary.setText("\n".join(fp8_bench.summary_lines(report)))
        pixmap = QPixmap(report.png)
        if not pixmap.isNull():
            self.bench_plot.setPixmap(pixmap.scaledToWidth(min(760, pixmap.width()),
                                                           Qt.TransformationMode.SmoothTransformation))
        self.bench_saved.setText(f"Saved: {report.json}\nPlot: {report.png}")

    # ---- quality check -----------------------------------------------------------------------

    def _build_quality_tab(self) -> None:
        self.quality = JobPanel(
            "Compares next-token predictions with the KV cache rounded through FP8 (E4M3 and E5M2) against the "
            "unrounded cache, on the CPU with transformers. It can run while you chat.",
            lambda: app_command("kv-check", "--progress-jsonl", *self._model_args()))
        self.quality_table = report_table(kv_quality_report.HEADERS)
        self.quality_advice = QLabel("")
        self.quality_advice.setWordWrap(True)
        self.use_dtype_button = QPushButton("Use the advised KV dtype")
        self.use_dtype_button.setEnabled(False)
        self.use_dtype_button.clicked.connect(self.use_advised_dtype)
        self._quality_advice: Advice | None = None
        self.quality.body.addWidget(self.quality_table, 1)
        self.quality.body.addWidget(self.quality_advice)
        self.quality.body.addWidget(self.use_dtype_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.quality.result_ready.connect(self.show_quality)
        self.tabs.addTab(self.quality, "Quality check")

    def show_quality(self, data: dict[str, Any]) -> None:
        check = QualityCheck.from_dict(data)
        fill_table(self.quality_table, quality_rows(check.report))
        self._quality_advice = check.advice
        self.quality_advice.setText(advice_text(check.advice))
        if check.advice:
            self.use_dtype_button.setText(f"Use {check.advice.kv_dtype}")
            self.use_dtype_button.setEnabled(not self.benchmark_running)

    def use_advised_dtype(self) -> None:
        if self._quality_advice:
            self._apply_engine(kv_cache_dtype=self._quality_advice.kv_dtype)

    # ---- calibration -------------------------------------------------------------------------

    def _build_calibration_tab(self) -> None:
        self.calibration = JobPanel(
            "Computes per-layer K and V scales for an FP8 KV cache and writes a calibrated copy of the model "
            "that vLLM loads them from. The quality check runs before and after.",
            lambda: app_command("calibrate", "--progress-jsonl", *self._model_args()))
        self.before_table = report_table(kv_quality_report.HEADERS)
        self.after_table = report_table(kv_quality_report.HEADERS)
        self.calibrated_label = QLabel("")
        self.calibrated_label.setWordWrap(True)
        self.calibrated_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.use_calibrated_button = QPushButton("Use calibrated model")
        self.use_calibrated_button.setEnabled(False)
        self.use_calibrated_button.clicked.connect(self.use_calibrated_model)
        self._calibrated_model: str | None = None
        for title, widget in (("Before calibration", self.before_table), ("After calibration", self.after_table)):
            self.calibration.body.addWidget(QLabel(title))
            self.calibration.body.addWidget(widget, 1)
        self.calibration.body.addWidget(self.calibrated_label)
        self.calibration.body.addWidget(self.use_calibrated_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.calibration.result_ready.connect(self.show_calibration)
        self.tabs.addTab(self.calibration, "Calibration")

    def show_calibration(self, data: dict[str, Any]) -> None:
        calibration = Calibration.from_dict(data)
        fill_table(self.before_table, quality_rows(calibration.before.report))
        fill_table(self.after_table, quality_rows(calibration.after.report))
        self._calibrated_model = calibration.calibrated_model
        self.calibrated_label.setText(f"Calibrated model: {self._calibrated_model}\n"
                                      f"{advice_text(calibration.advice)}")
        self.use_calibrated_button.setEnabled(not self.benchmark_running)

    def use_calibrated_model(self) -> None:
        if self._calibrated_model:
            self._apply_engine(model=self._calibrated_model, kv_cache_dtype="fp8_e4m3")

    # ---- shared ------------------------------------------------------------------------------

    def _apply_engine(self, **update: Any) -> None:
        """Through the one settings path: saved, and the chat engine restarts on the change."""
        self.controller.apply_settings(self.controller.settings.with_engine(**update))

    @property
    def panels(self) -> tuple[JobPanel, ...]:
        return (self.bench, self.saturation.panel, self.quality, self.calibration)

    def closeEvent(self, event: QCloseEvent) -> None:
        """Closing cancels every running job (and its process group) before the dialog goes."""
        for panel in self.panels:
            panel.shut()
        super().closeEvent(event)

    def reject(self) -> None:
        """Escape and the Close paths end running jobs too."""
        for panel in self.panels:
            panel.shut()
        super().reject()
