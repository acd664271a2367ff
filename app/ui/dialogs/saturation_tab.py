"""The Saturation tab of Measure FP8…: `nalar bench saturation` as a child job, its heatmap and knees."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QLabel, QScrollArea, QVBoxLayout, QWidget

from app.core.measure.saturation_report import HEADERS, SaturationReport, table_rows
from app.ui.dialogs.job_panel import JobPanel, app_command, fill_table, report_table


class SaturationTab(QWidget):
    """Run and Cancel (the shared JobPanel), then one sentence per KV dtype, the cell table and the heatmap."""

    def __init__(self, model_args: Callable[[], list[str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.panel = JobPanel(
            "Sweeps context length × concurrent chats for KV cache dtype auto, then fp8 where this machine runs "
            "it: peak KV use, preemptions, p50/p95 ms/token and time to first token per cell, and where each "
            "context length hits its KV knee and its latency knee. On the CPU the KV pool is kept small (8 MiB) "
            "so that it fills within minutes. The chat engine is stopped while it runs.",
            lambda: app_command("bench", "saturation", "--progress-jsonl", *model_args()))
        self.sentences = QLabel("")
        self.sentences.setWordWrap(True)
        self.sentences.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = report_table(HEADERS)
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

    def show_report(self, data: dict[str, Any]) -> None:
        report = SaturationReport.from_dict(data)
        self.sentences.setText("\n".join(report.sentences()))
        fill_table(self.table, table_rows(report))
        pixmap = QPixmap(report.png)
        if not pixmap.isNull():
            self.heatmap.setPixmap(pixmap.scaledToWidth(min(820, pixmap.width()),
                                                        Qt.TransformationMode.SmoothTransformation))
        self.saved.setText(f"Saved: {report.json}\nHeatmap: {report.png}")
