"""Compare… (Chat menu): the shown chat's last question, answered under 2 to 4 variants at once, side by side.

The dialog picks the variants, runs them through a CompareRunner, shows a column per variant and the line that
says whether the final answers agree; "Keep this one" makes that reply the chat's branch (the others stay as
its tries, ◀ ▶ in the thread). It is window-modal: the chat doesn't change under a comparison.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPushButton, QSplitter, QVBoxLayout, QWidget
from qasync import asyncSlot
from shiboken6 import isValid

from app.core.chat.conversation import Conversation
from app.core.settings.settings import SamplingConfig
from app.core.steering.compare import MAX_VARIANTS, MIN_VARIANTS, Variant
from app.ui.compare.compare_columns import VariantColumn, VariantPicker
from app.ui.compare.compare_runner import CompareRunner

DEFAULT_ROWS = (("Think off", 0.0), ("Budget", 256.0), ("Unlimited", 0.0), ("None", 0.6))


class CompareDialog(QDialog):
    """``kept`` (emitted once a reply is kept) lets the window redraw the chat on its new branch."""

    def __init__(self, runner: CompareRunner, conversation: Conversation, sampling: SamplingConfig,
                 presets: Sequence[str] = (), parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Compare")
        self.resize(1100, 640)
        self.runner, self.conversation, self.sampling = runner, conversation, sampling
        self.index = len(conversation.turns) - 1
        question = QLabel(f"Question: {conversation.turns[self.index].user}")
        question.setTextFormat(Qt.TextFormat.PlainText)
        question.setWordWrap(True)
        self.pickers = [VariantPicker(kind, value, presets) for kind, value in DEFAULT_ROWS[:MAX_VARIANTS]]
        self.run_button = QPushButton("Run")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.run_button.clicked.connect(self.start)
        self.stop_button.clicked.connect(self.stop)
        picks = QHBoxLayout()
        for picker in self.pickers:
            picks.addWidget(picker, 1)
        picks.addWidget(self.run_button)
        picks.addWidget(self.stop_button)
        self.columns_split = QSplitter(Qt.Orientation.Horizontal)
        self.columns: list[VariantColumn] = []
        self.agreement = QLabel(f"Choose {MIN_VARIANTS} to {MAX_VARIANTS} variants, then Run: they answer at once.")
        self.agreement.setObjectName("CompareAgreement")
        self.agreement.setTextFormat(Qt.TextFormat.PlainText)
        self.agreement.setStyleSheet("font-weight: bold; padding: 4px")
        layout = QVBoxLayout(self)
        layout.addWidget(question)
        layout.addLayout(picks)
        layout.addWidget(self.columns_split, 1)
        layout.addWidget(self.agreement)
        runner.column_changed.connect(self._on_column)
        runner.all_done.connect(self._on_done)

    def variants(self) -> list[Variant]:
        return [variant for picker in self.pickers if (variant := picker.variant()) is not None]

    @asyncSlot()
    async def start(self) -> None:
        """Run the chosen variants (a refused set says why in the agreement line and sends nothing)."""
        if self.runner.running:
            return
        variants = self.variants()
        if not MIN_VARIANTS <= len(variants) <= MAX_VARIANTS:
            self.agreement.setText(f"Choose {MIN_VARIANTS} to {MAX_VARIANTS} variants (now {len(variants)}).")
            return
        self.run_button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self.agreement.setText("Running…")
        try:
            await self.runner.run(self.conversation, self.index, variants, self.sampling,
                                  on_started=self._show_columns)
        except ValueError as refused:  # a preset that is gone: nothing was sent
            self.agreement.setText(str(refused))
        if not isValid(self):  # closed while the replies ran: they ended as stopped, kept as tries
            return
        self.run_button.setEnabled(True)
        self.stop_button.setEnabled(False)

    def _show_columns(self) -> None:
        for column in self.columns:
            column.deleteLater()
        assert self.runner.comparison is not None
        self.columns = [VariantColumn(run) for run in self.runner.comparison.runs]
        for place, column in enumerate(self.columns):
            column.keep_clicked.connect(lambda place=place: self.keep(place))
            self.columns_split.addWidget(column)

    @asyncSlot()
    async def stop(self) -> None:
        await self.runner.stop()

    def keep(self, place: int) -> None:
        self.runner.keep(place)
        self.accept()

    def _on_column(self, place: int) -> None:
        if 0 <= place < len(self.columns):
            column = self.columns[place]
            column.show_figures(self.runner.figures.get(column.run.request_id))

    def _on_done(self) -> None:
        """Every reply ended (its Finished reached the window, which can be a frame after its request returned)."""
        if self.runner.comparison is not None:
            self.agreement.setText(self.runner.comparison.agreement().line)
        for column in self.columns:  # a reply is kept once all have ended
            column.keep_button.setEnabled(True)

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.runner.running:  # replies still running end here, kept as they are (stopped)
            asyncio.ensure_future(self.runner.stop())
        super().closeEvent(event)

    def reject(self) -> None:
        if self.runner.running:
            asyncio.ensure_future(self.runner.stop())
        super().reject()

