"""Tool-call cards between the thinking and the answer: the tool, its arguments, Run / Always / Deny, and
the result, folded. Everything a tool or the model wrote is shown as plain text, never as rich text."""

from __future__ import annotations

import json

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.chat.conversation import ToolRound, ToolStep

STATUS_TEXT = {"pending": "waits for your approval", "running": "running…", "ok": "done", "error": "failed",
               "timeout": "timed out", "denied": "denied", "stopped": "not run (stopped)",
               "refused": "not run (over Nalar's limits)"}


def plain_label(text: str = "") -> QLabel:
    """A label that never interprets its text as HTML (tool names, arguments and results are untrusted)."""
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setText(text)
    return label


def pretty_arguments(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


class ToolCallCard(QFrame):
    """One call. Its buttons show only while it waits for the user."""

    run = Signal()
    always = Signal()
    deny = Signal()

    def __init__(self, step: ToolStep, parent: QWidget | None = None, *, live: bool = True) -> None:
        super().__init__(parent)
        self.live = live  # False: a stored reply's call, which no button can run any more
        self.setObjectName("ToolCallCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setStyleSheet("#ToolCallCard { background: #f4f1e8; border: 1px solid #d8cfb4; border-radius: 4px; }")
        self.title = plain_label()
        bold = self.title.font()
        bold.setBold(True)
        self.title.setFont(bold)
        self.status = plain_label()
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.arguments = plain_label(pretty_arguments(step.arguments))
        self.arguments.setFont(mono)
        self.run_button = QPushButton("Run")
        self.always_button = QPushButton("Always for this tool")
        self.always_button.setToolTip("Run this call, and run this tool without asking from now on")
        self.deny_button = QPushButton("Deny")
        self.run_button.clicked.connect(self.run)
        self.always_button.clicked.connect(self.always)
        self.deny_button.clicked.connect(self.deny)
        self.result_toggle = QToolButton()
        self.result_toggle.setCheckable(True)
        self.result_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.result_toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.result_toggle.toggled.connect(self._on_result_toggled)
        self.result_view = QPlainTextEdit(readOnly=True)  # plain text: a result is never rendered or run
        self.result_view.setObjectName("ToolResult")
        self.result_view.setFont(mono)
        self.result_view.setMaximumHeight(140)
        self.result_view.hide()
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.status)
        buttons = QHBoxLayout()
        for button in (self.run_button, self.always_button, self.deny_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.addLayout(top)
        layout.addWidget(self.arguments)
        layout.addLayout(buttons)
        layout.addWidget(self.result_toggle)
        layout.addWidget(self.result_view)
        self.show_step(step)

    def show_step(self, step: ToolStep) -> None:
        where = f"  ·  {step.server}" if step.server else ""
        self.title.setText(f"⚙ {step.name}{where}")
        waiting = step.status == "pending" and self.live
        self.status.setText(STATUS_TEXT.get(step.status, step.status) if self.live or step.done else "not run")
        for button in (self.run_button, self.always_button, self.deny_button):
            button.setVisible(waiting)
        self.result_toggle.setVisible(step.done)
        first_line = step.result.strip().splitlines()[0] if step.result.strip() else "(empty)"
        self.result_toggle.setText(f"Result: {first_line[:80]}")
        if self.result_view.toPlainText() != step.result:
            self.result_view.setPlainText(step.result)

    @property
    def result_folded(self) -> bool:
        return not self.result_toggle.isChecked()

    def _on_result_toggled(self, shown: bool) -> None:
        self.result_view.setVisible(shown)
        self.result_toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)


class ToolCallsPanel(QScrollArea):
    """The calls of the reply shown in the panes, one card each, in order; hidden while there are none."""

    run = Signal(object)     # ToolStep
    always = Signal(object)
    deny = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ToolCallsPanel")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        body = QWidget()
        self._layout = QVBoxLayout(body)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.addStretch(1)
        self.setWidget(body)
        self.cards: dict[str, ToolCallCard] = {}  # call id: its card
        self.hide()

    def clear(self) -> None:
        for card in self.cards.values():
            card.deleteLater()
        self.cards.clear()
        self.hide()

    def add_round(self, tool_round: ToolRound, *, live: bool = True) -> None:
        for step in tool_round.calls:
            card = ToolCallCard(step, live=live)
            card.run.connect(lambda step=step: self.run.emit(step))
            card.always.connect(lambda step=step: self.always.emit(step))
            card.deny.connect(lambda step=step: self.deny.emit(step))
            self._layout.insertWidget(self._layout.count() - 1, card)
            self.cards[step.call_id] = card
        self.show()

    def update_step(self, step: ToolStep) -> None:
        if card := self.cards.get(step.call_id):
            card.show_step(step)

    def show_rounds(self, rounds: list[ToolRound]) -> None:
        """A stored reply's calls, without buttons (a call an interrupted reply left waiting can't run now)."""
        self.clear()
        for tool_round in rounds:
            self.add_round(tool_round, live=False)
