"""The Saturation tab of Measure FP8…: `nalar bench saturation` as a child job, its heatmap and knees."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QLabel,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.ui.job_panel import JobPanel, app_command

HEADERS = ["KV dtype", "context", "chats", "peak KV", "preemptions", "waited", "p50 ms/token", "p95 ms/token",
           "TTFT p50", "knee"]


def saturation_rows(report: dict[str, Any]) -> list[list[str]]:
    """One table row per measured cell; the knee column marks the KV knee and the first latency knee."""
    rows: list[list[str]] = []
    for run in report.get("runs", []):
        dtype = run["kv_cache_dtype"]
        if not run["supported"]:
            rows.append([dtype, "not run", run.get("reason") or "", "", "", "", "", "", "", ""])
            continue
        for row in run["rows"]:
            latency = row["latency_knees"][0] if row["latency_knees"] else None
            for cell in row["cells"]:
                marks = []
                if cell["concurrency"] == row["kv_knee"]:
                    marks.append("KV")
                if cell["concurrency"] == row["predicted_kv_knee"]:
                    marks.append("KV (predicted)")
                if cell["concurrency"] == latency:
                    marks.append("latency")
                rows.append([dtype, f"{row['context_tokens']:,}", str(cell["concurrency"]),
                             f"{cell['peak_kv_usage']:.0%}", str(cell["preemptions"]),
                             "yes" if cell["waited"] else "no", f"{cell['ms_per_token_p50']:.1f}",
                             f"{cell['ms_per_token_p95']:.1f}", f"{cell['ttft_p50_s'] * 1000:.0f} ms",
                             ", ".join(marks)])
    return rows


class SaturationTab(QWidget):
    """Run and Cancel (the shared JobPanel), then one sentence per KV dtype, the cell table and the heatmap."""

    def __init__(self, model_args: Callable[[], list[str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.panel = JobPanel(
            "Sweeps context length × concurrent chats for KV cache dtype auto, then fp8 where this machine runs "
            "it: peak KV use, preemptions, p50/p95 ms/token and time to first token per cell, and where each "
            "context length hits its KV knee and its latency knee. On the CPU the KV pool is kept small (32 MiB) "
            "so that it fills within minutes. The chat engine is stopped while it runs.",
            lambda: app_command("bench", "saturation", "--progress-jsonl", *model_args()))
        self.sentences = QLabel("")
        self.sentences.setWordWrap(True)
        self.sentences.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(HEADERS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.setMinimumHeight(180)
        self.heatmap = QLabel()
        self.heatmap.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.saved = QLabel("")
        self.saved.setWordWrap(True)
        self.saved.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        results = QWidget()
        inner = QVBoxLayout(results)
        for widget in (self.sentences, self.heatmap, self.table, self.saved):
            inner.addWidget(widget)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(results)
        self.panel.body.addWidget(scroll)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.panel)
        self.panel.result_ready.connect(self.show_report)

    def show_report(self, report: dict[str, Any]) -> None:
        self.sentences.setText("\n".join(run["sentence"] for run in report.get("runs", [])))
        rows = saturation_rows(report)
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, value in enumerate(row):
                self.table.setItem(r, c, QTableWidgetItem(value))
        self.table.resizeColumnsToContents()
        pixmap = QPixmap(report["png"])
        if not pixmap.isNull():
            self.heatmap.setPixmap(pixmap.scaledToWidth(min(820, pixmap.width()),
                                                        Qt.TransformationMode.SmoothTransformation))
        self.saved.setText(f"Saved: {report['json']}\nHeatmap: {report['png']}")
