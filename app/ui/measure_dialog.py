"""Measure FP8…: the benchmark, the KV quality check and calibration, run as child jobs.

Each job is `python -m app bench|kv-check|calibrate --progress-jsonl` in its own session
(process group), read line by line on plain threads whose lines reach the GUI thread as
queued Qt signals. Cancel sends SIGTERM to the whole group, then SIGKILL after a grace
period, so a job and the engine processes it started end together. Closing the dialog
cancels what runs. The benchmark needs the machine to itself: the chat engine is stopped
before it and started again after it.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)
from qasync import asyncSlot

from app.core.job_lines import JobLine, parse_job_line

if TYPE_CHECKING:
    from app.ui.main_window import MainWindow

STDERR_TAIL_LINES = 40
CANCEL_GRACE_S = 15.0  # the bench closes its engine on SIGTERM; vLLM's own shutdown waits up to 5 s


def app_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "app", *args]


class JobProcess(QObject):
    """One job child process in its own session. ``line`` and ``finished`` arrive on the GUI thread."""

    line = Signal(object)          # JobLine
    finished = Signal(int, str)    # exit code, stderr tail

    def __init__(self, argv: list[str], parent: QObject | None = None, grace_s: float = CANCEL_GRACE_S) -> None:
        super().__init__(parent)
        self.argv = argv
        self.grace_s = grace_s
        self.proc: subprocess.Popen[str] | None = None
        self.cancelled = False
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._threads: list[threading.Thread] = []
        self._quiet = False  # set when the owner goes away: no more signals
        self._kill_timer = QTimer(self)
        self._kill_timer.setSingleShot(True)
        self._kill_timer.timeout.connect(self.kill_group)

    def start(self) -> None:
        package_root = str(Path(__file__).resolve().parents[2])  # `-m app` works from a source checkout too
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH"))
                                                          if p), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True, encoding="utf-8", errors="replace",
                                     bufsize=1, env=env, start_new_session=True)
        readers = [threading.Thread(target=self._read_stdout, name="job-stdout", daemon=True),
                   threading.Thread(target=self._read_stderr, name="job-stderr", daemon=True)]
        for thread in readers:
            thread.start()
        waiter = threading.Thread(target=self._wait, args=(readers,), name="job-wait", daemon=True)
        waiter.start()
        self._threads = [*readers, waiter]

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pgid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None  # start_new_session: the group is the child's pid

    # ---- worker threads (no widgets here: they only emit) --------------------------------------

    def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            parsed = parse_job_line(raw)
            if parsed is not None and not self._quiet:
                self.line.emit(parsed)

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            self._stderr_tail.append(raw.rstrip("\n"))

    def _wait(self, readers: list[threading.Thread]) -> None:
        assert self.proc is not None
        code = self.proc.wait()
        for thread in readers:
            thread.join(5)  # a pipe held by a leftover grandchild must not hang us
        if not self._quiet:
            self.finished.emit(code, "\n".join(self._stderr_tail))

    # ---- cancelling --------------------------------------------------------------------------

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.pgid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, sig)

    def cancel(self) -> None:
        """SIGTERM to the group now, SIGKILL after the grace period (without blocking the UI)."""
        if self.proc is None:
            return
        self.cancelled = True
        self._signal_group(signal.SIGTERM)
        self._kill_timer.start(int(self.grace_s * 1000))

    def kill_group(self) -> None:
        self._signal_group(signal.SIGKILL)

    def terminate_and_wait(self) -> None:
        """Blocking, for closing: SIGTERM, wait the grace period, SIGKILL what is left; no more signals."""
        self._quiet = True
        self._kill_timer.stop()
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.cancelled = True
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(self.grace_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill_group()  # grandchildren (an EngineCore) may outlive the job itself
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        for thread in self._threads:
            thread.join(5)


class JobPanel(QWidget):
    """Run and Cancel, a progress bar with the current step, and the error of a failed run."""

    result_ready = Signal(dict)
    running_changed = Signal(bool)

    def __init__(self, intro: str, command: Callable[[], list[str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.command = command
        self.before_run: Callable[[], Awaitable[bool]] | None = None  # False: don't start
        self.after_run: Callable[[], None] | None = None
        self.grace_s = CANCEL_GRACE_S
        self.job: JobProcess | None = None
        self._shut = False  # the dialog is closing: start nothing more
        self.last_result: dict[str, Any] | None = None
        self.intro = QLabel(intro)
        self.intro.setWordWrap(True)
        self.run_button = QPushButton("Run")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setValue(0)
        self.step_label = QLabel("")
        self.error_label = QLabel("")
        self.error_label.setWordWrap(True)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_label.setStyleSheet("color: #b00020;")
        self.error_label.hide()
        controls = QHBoxLayout()
        controls.addWidget(self.run_button)
        controls.addWidget(self.cancel_button)
        controls.addWidget(self.progress, 1)
        self.body = QVBoxLayout()  # the tab puts its result view here
        layout = QVBoxLayout(self)
        layout.addWidget(self.intro)
        layout.addLayout(controls)
        layout.addWidget(self.step_label)
        layout.addWidget(self.error_label)
        layout.addLayout(self.body, 1)
        self.run_button.clicked.connect(self.run)
        self.cancel_button.clicked.connect(self.cancel)

    @property
    def running(self) -> bool:
        return self.job is not None

    @asyncSlot()
    async def run(self) -> None:
        if self.job is not None:
            return
        self.run_button.setEnabled(False)
        self.error_label.hide()
        self.progress.setValue(0)
        if self.before_run is not None and not await self.before_run():
            self.run_button.setEnabled(True)
            return
        if self._shut:  # closed while the chat engine was stopping
            self._ended()
            return
        self.job = JobProcess(self.command(), self, grace_s=self.grace_s)
        self.job.line.connect(self.on_line)
        self.job.finished.connect(self.on_finished)
        self.cancel_button.setEnabled(True)
        self.step_label.setText("starting…")
        self.running_changed.emit(True)
        try:
            self.job.start()
        except OSError as exc:
            self.job = None
            self._show_error(f"The job could not start: {exc}", "")
            self._ended()

    def cancel(self) -> None:
        if self.job is not None:
            self.step_label.setText("cancelling…")
            self.cancel_button.setEnabled(False)
            self.job.cancel()

    def on_line(self, line: JobLine) -> None:
        if line.event == "progress":
            if line.fraction is None:
                self.progress.setRange(0, 0)
            else:
                self.progress.setRange(0, 100)
                self.progress.setValue(round(line.fraction * 100))
            self.step_label.setText(line.message)
        elif line.event == "error" and self.job is not None and not self.job.cancelled:
            self._show_error(line.message, line.fix)
        elif line.event == "result" and line.data is not None:
            self.last_result = line.data
            self.result_ready.emit(line.data)

    def on_finished(self, code: int, stderr_tail: str) -> None:
        job, self.job = self.job, None
        if job is None:
            return
        if job.cancelled:
            self.step_label.setText("cancelled")
        elif code != 0:
            if self.error_label.isHidden():  # no error line: the stderr tail is all we have
                tail = "\n".join(stderr_tail.splitlines()[-8:]) or "(no output)"
                self._show_error(f"The job exited with code {code}.", f"Its last output:\n{tail}")
            self.step_label.setText("failed")
        else:
            self.progress.setRange(0, 100)
            self.progress.setValue(100)
            self.step_label.setText("done")
        job.deleteLater()
        self._ended()

    def _show_error(self, message: str, fix: str) -> None:
        self.error_label.setText(message + (f"\nFix: {fix}" if fix else ""))
        self.error_label.show()

    def _ended(self) -> None:
        self.run_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        self.progress.setRange(0, 100)
        self.running_changed.emit(False)
        if self.after_run is not None:
            self.after_run()

    def shut(self) -> None:
        """Closing: end the job and everything it started, now."""
        self._shut = True
        job, self.job = self.job, None
        if job is not None:
            job.terminate_and_wait()
            self.step_label.setText("cancelled")
            self._ended()


def _table(headers: list[str]) -> QTableWidget:
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.verticalHeader().hide()
    table.horizontalHeader().setStretchLastSection(True)
    return table


def _set_rows(table: QTableWidget, rows: list[list[str]]) -> None:
    table.setRowCount(len(rows))
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            table.setItem(r, c, QTableWidgetItem(value))
    table.resizeColumnsToContents()


def _fmt(value: Any, spec: str, scale: float = 1.0) -> str:
    return "–" if value is None else format(value * scale, spec)


def quality_rows(report: dict[str, Any]) -> list[list[str]]:
    """The unrounded reference first (by definition 100% and 0), then each FP8 variant."""
    prompts = report.get("prompts") or 0  # kv-check reports a count; a list of prompts counts too
    tokens = int(report.get("tokens_per_prompt") or 0) * (prompts if isinstance(prompts, int) else len(prompts))
    rows = [["unrounded", "–", "100.0%", "0", str(tokens or "–")]]
    for row in report.get("results", []):
        rows.append([row["kv_dtype"], row["scales"], _fmt(row["top1_agreement"], ".1%"),
                     _fmt(row["mean_kl"], ".4f"), str(row.get("tokens", "–"))])
    return rows


QUALITY_HEADERS = ["KV cache", "scales", "top-1 agreement", "mean KL per token", "tokens"]


def advice_text(advice: dict[str, Any] | None) -> str:
    if not advice:
        return ""
    return f"Advice: use {advice['kv_dtype']} (confidence: {advice['confidence']}). {advice['reason']}"


class MeasureDialog(QDialog):
    """Engine → Measure FP8…: Benchmark, Quality check and Calibration tabs."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window_ = window
        self.setWindowTitle("Measure FP8")
        self.setModal(False)
        self.resize(900, 700)
        self.tabs = QTabWidget()
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        self._restart_chat_after_bench = False
        self._build_bench_tab()
        self._build_quality_tab()
        self._build_calibration_tab()

    def _model_args(self) -> list[str]:
        model = self.window_.settings.engine.model
        return ["--model", model] if model else []

    # ---- benchmark ---------------------------------------------------------------------------

    def _build_bench_tab(self) -> None:
        self.bench = JobPanel(
            "Runs the configured model with KV cache dtype auto, then fp8 where this machine supports it: time "
            "to first token, ms/token at several context depths, KV capacity, and the bandwidth floor. "
            "The chat engine is stopped while it runs (the benchmark needs the memory and an idle machine) "
            "and started again afterwards.",
            lambda: app_command("bench", "--progress-jsonl"))
        self.bench.before_run = self._stop_chat_engine
        self.bench.after_run = self._restart_chat_engine
        self.bench_summary = QLabel("")
        self.bench_summary.setWordWrap(True)
        self.bench_summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.bench_table = _table(["KV dtype", "context", "TTFT ms", "ms/token", "tok/s", "floor ms/token",
                                   "measured ÷ floor"])
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

    async def _stop_chat_engine(self) -> bool:
        window = self.window_
        if window.streaming:
            self.bench._show_error("A reply is streaming.", "Stop it (or wait for it), then run the benchmark.")
            return False
        self._restart_chat_after_bench = window.controller.running
        if self._restart_chat_after_bench:
            self.bench.step_label.setText("stopping the chat engine…")
        await window.controller.pause()
        return True

    def _restart_chat_engine(self) -> None:
        if self._restart_chat_after_bench:
            self._restart_chat_after_bench = False
            self.window_.controller.resume()

    def _bench_running(self, running: bool) -> None:
        # Applying a setting restarts the chat engine: not while the benchmark has the machine.
        self.use_dtype_button.setEnabled(not running and self._quality_advice is not None)
        self.use_calibrated_button.setEnabled(not running and self._calibrated_model is not None)

    def show_bench(self, report: dict[str, Any]) -> None:
        rows: list[list[str]] = []
        summary = [f"Model: {report['model']} · {report['tokens_per_measurement']} decode tokens per "
                   f"measurement · bandwidth {report['bandwidth']['gb_s']} GB/s ({report['bandwidth']['source']})"]
        for run in report["runs"]:
            dtype = run["kv_cache_dtype"]
            if not run["supported"]:
                rows.append([dtype, "not run", run["reason"], "", "", "", ""])
                summary.append(f"{dtype}: not run on this machine: {run['reason']}")
                continue
            summary.append(f"{dtype}: KV capacity {run['kv_capacity_tokens']:,} tokens, max concurrency "
                           f"{run['max_concurrency']}× at {run['max_model_len']:,} tokens")
            rows.append([dtype, "reasoning prompts", _fmt(run["ttft_s"], ".0f", 1000), _fmt(run["ms_per_token"], ".2f"),
                         _fmt(run["tok_s"], ".1f"), "", ""])
            for row in run["depths"]:
                rows.append([dtype, f"{row['depth']:,}", _fmt(row["ttft_s"], ".0f", 1000),
                             _fmt(row["ms_per_token"], ".2f"), _fmt(row["tok_s"], ".1f"),
                             _fmt(row["floor_ms_per_token"], ".2f"), _fmt(row["measured_over_floor"], ".1f") + "×"])
        comparison = report.get("comparison") or {}
        if comparison:
            summary.append(f"{comparison['fp8']} holds {comparison['capacity_ratio']}× the tokens of auto.")
        for asked, used in (report.get("capped_depths") or {}).items():
            summary.append(f"Depth {int(asked):,} was capped to {used:,}: {report['capped_reason']}.")
        _set_rows(self.bench_table, rows)
        table = self.bench_table  # every row shown: the scroll area scrolls, not the table
        rows_height = sum(table.rowHeight(r) for r in range(len(rows)))
        table.setMinimumHeight(table.horizontalHeader().height() + rows_height + 6)
        self.bench_summary.setText("\n".join(summary))
        pixmap = QPixmap(report["png"])
        if not pixmap.isNull():
            self.bench_plot.setPixmap(pixmap.scaledToWidth(min(760, pixmap.width()),
                                                           Qt.TransformationMode.SmoothTransformation))
        self.bench_saved.setText(f"Saved: {report['json']}\nPlot: {report['png']}")

    # ---- quality check -----------------------------------------------------------------------

    def _build_quality_tab(self) -> None:
        self.quality = JobPanel(
            "Compares next-token predictions with the KV cache rounded through FP8 (E4M3 and E5M2) against the "
            "unrounded cache, on the CPU with transformers. It can run while you chat.",
            lambda: app_command("kv-check", "--progress-jsonl", *self._model_args()))
        self.quality_table = _table(QUALITY_HEADERS)
        self.quality_advice = QLabel("")
        self.quality_advice.setWordWrap(True)
        self.use_dtype_button = QPushButton("Use the advised KV dtype")
        self.use_dtype_button.setEnabled(False)
        self.use_dtype_button.clicked.connect(self.use_advised_dtype)
        self._quality_advice: dict[str, Any] | None = None
        self.quality.body.addWidget(self.quality_table, 1)
        self.quality.body.addWidget(self.quality_advice)
        self.quality.body.addWidget(self.use_dtype_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.quality.result_ready.connect(self.show_quality)
        self.tabs.addTab(self.quality, "Quality check")

    def show_quality(self, report: dict[str, Any]) -> None:
        _set_rows(self.quality_table, quality_rows(report))
        self._quality_advice = report.get("advice")
        self.quality_advice.setText(advice_text(self._quality_advice))
        if self._quality_advice:
            self.use_dtype_button.setText(f"Use {self._quality_advice['kv_dtype']}")
            self.use_dtype_button.setEnabled(not self.bench.running)

    def use_advised_dtype(self) -> None:
        if self._quality_advice:
            self._apply_engine(kv_cache_dtype=self._quality_advice["kv_dtype"])

    # ---- calibration -------------------------------------------------------------------------

    def _build_calibration_tab(self) -> None:
        self.calibration = JobPanel(
            "Computes per-layer K and V scales for an FP8 KV cache and writes a calibrated copy of the model "
            "that vLLM loads them from. The quality check runs before and after.",
            lambda: app_command("calibrate", "--progress-jsonl", *self._model_args()))
        self.before_table = _table(QUALITY_HEADERS)
        self.after_table = _table(QUALITY_HEADERS)
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

    def show_calibration(self, report: dict[str, Any]) -> None:
        _set_rows(self.before_table, quality_rows(report["before"]))
        _set_rows(self.after_table, quality_rows(report["after"]))
        self._calibrated_model = report["calibrated_model"]
        self.calibrated_label.setText(f"Calibrated model: {self._calibrated_model}\n"
                                      f"{advice_text(report.get('advice'))}")
        self.use_calibrated_button.setEnabled(not self.bench.running)

    def use_calibrated_model(self) -> None:
        if self._calibrated_model:
            self._apply_engine(model=self._calibrated_model, kv_cache_dtype="fp8_e4m3")

    # ---- shared ------------------------------------------------------------------------------

    def _apply_engine(self, **update: Any) -> None:
        """Through the window's settings path: saved, and the chat engine restarts on the change."""
        window = self.window_
        window.apply_settings(window.settings.with_engine(**update))

    @property
    def panels(self) -> tuple[JobPanel, ...]:
        return (self.bench, self.quality, self.calibration)

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
