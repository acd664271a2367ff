"""The Compare dialog's parts: a row that picks one variant, and a column that shows one variant's reply.

Model text is shown as plain text (QPlainTextEdit), never as markup. A column observes its run's Qt-free
``Reply`` as the chat's panes observe theirs; its figures line is the runner's.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.steering.compare import Variant, VariantRun
from app.engine.events import Metrics

# The kinds a row offers; presets add "Preset: NAME" entries after these (VariantPicker's ``presets``).
KINDS = ("None", "Think off", "Budget", "Unlimited", "Temperature")
PRESET_PREFIX = "Preset: "


class VariantPicker(QWidget):
    """One variant: its kind, and the number a budget (tokens) or a temperature takes."""

    def __init__(self, kind: str, value: float, presets: Sequence[str] = (), parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.kind = QComboBox()
        self.kind.addItems([*KINDS, *(PRESET_PREFIX + name for name in presets)])
        self.value = QDoubleSpinBox()
        self.kind.currentTextChanged.connect(self._fit_value)
        self.kind.setCurrentText(kind)
        self._fit_value(kind)
        self.value.setValue(value)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.kind, 1)
        layout.addWidget(self.value)

    def _fit_value(self, kind: str) -> None:
        budget = kind == "Budget"
        self.value.setVisible(kind in ("Budget", "Temperature"))
        self.value.setDecimals(0 if budget else 2)
        self.value.setRange(*((1, 131_072) if budget else (0.0, 2.0)))
        self.value.setSingleStep(64 if budget else 0.1)
        self.value.setSuffix(" tokens" if budget else "")

    def variant(self) -> Variant | None:
        """The chosen variant, or None for "None" (the row is unused)."""
        kind, value = self.kind.currentText(), self.value.value()
        if kind.startswith(PRESET_PREFIX):
            name = kind.removeprefix(PRESET_PREFIX)
            return Variant(name, preset=name)
        return {"Think off": Variant.think_off(), "Budget": Variant.budget(int(value)),
                "Unlimited": Variant.unlimited(), "Temperature": Variant.at_temperature(round(value, 2))}.get(kind)


class VariantColumn(QWidget):
    """One variant's reply: its name, its thinking (folded), its answer, tokens and time, and Keep."""

    keep_clicked = Signal()

    def __init__(self, run: VariantRun, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.run = run
        self.title = QLabel(f"<b>{html.escape(run.variant.label)}</b>")  # a preset's name is the user's text
        self._thinking_tokens = 0
        self.fold = QToolButton()
        self.fold.setCheckable(True)
        self.fold.setAutoRaise(True)
        self.fold.toggled.connect(self._on_fold)
        self.thinking = _plain("CompareThinking")
        self.answer = _plain("CompareAnswer")
        self.figures = QLabel("waiting…")
        self.keep_button = QPushButton("Keep this one")
        self.keep_button.setEnabled(False)
        self.keep_button.clicked.connect(self.keep_clicked)
        layout = QVBoxLayout(self)
        for widget in (self.title, self.fold, self.thinking, self.answer, self.figures, self.keep_button):
            layout.addWidget(widget)
        layout.setStretch(layout.indexOf(self.answer), 1)
        self._on_fold(False)
        reply = run.reply
        reply.reset.connect(lambda _none: self.draw())
        reply.thinking_added.connect(lambda text: _append(self.thinking, text))
        reply.answer_added.connect(lambda text: _append(self.answer, text))
        reply.state_changed.connect(lambda _state: self.draw())
        self.draw()

    def _on_fold(self, unfolded: bool) -> None:
        self.thinking.setVisible(unfolded)
        self._fold_text()

    def _fold_text(self) -> None:
        if self.run.done and not self.run.reply.thinking:
            self.fold.setText("No thinking")
            self.fold.setEnabled(False)
            return
        tokens = f" ({self._thinking_tokens:,} tokens)" if self._thinking_tokens else ""
        self.fold.setText(("▾ " if self.fold.isChecked() else "▸ ") + "Thinking" + tokens)

    def draw(self) -> None:
        """Everything again from the run's reply (its texts once it ended: they are the engine's final ones)."""
        self.thinking.setPlainText(self.run.reply.thinking)
        self.answer.setPlainText(self.run.reply.answer)

    def show_figures(self, metrics: Metrics | None) -> None:
        turn, run = self.run.turn, self.run
        thinking, answer = ((turn.thinking_tokens, turn.answer_tokens) if run.done or metrics is None
                            else (metrics.thinking_tokens, metrics.answer_tokens))
        took = f"{run.elapsed_s:.1f} s" if run.elapsed_s is not None else "running…"
        ended = "" if not run.done or turn.finish_reason == "stop" else f" · {turn.finish_reason}"
        self.figures.setText(f"thinking {thinking:,} · answer {answer:,} tokens · {took}{ended}")
        self._thinking_tokens = thinking
        self._fold_text()


def _plain(name: str) -> QPlainTextEdit:
    view = QPlainTextEdit()
    view.setObjectName(name)
    view.setReadOnly(True)
    return view


def _append(view: QPlainTextEdit, text: str) -> None:
    cursor = view.textCursor()
    cursor.movePosition(cursor.MoveOperation.End)
    cursor.insertText(text)
