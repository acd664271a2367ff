"""The live turn: ThinkingPane (raw trace, folds away) and the prompt; AnswerPane (Markdown) is in answer_view.

Each pane draws a text it is told grew (``append``) and reads it back from ``source``: in the window, the
Reply model, so the text is kept there once; a pane made alone keeps its own (``TextBuffer``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtGui import QColor, QFont, QKeyEvent, QTextCursor
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.chat.conversation import ThinkingEdit
from app.engine.errors import EngineFailure, FailureKind
from app.ui.chat.plain_text import escaped

# Qt re-lays out a whole block on every insert; a trace with no newlines would make that O(n²).
# Past this length a block is broken at the next space (display only; text() keeps the original).
MAX_DISPLAY_BLOCK = 2000
# Failures a restart can cure (the others need a settings change, which their fix names).
BUDGET_REACHED = "— budget reached —"  # where the think budget closed the thinking (the trace and the header)
RESTARTABLE = (FailureKind.ENGINE_DIED, FailureKind.NOT_READY, FailureKind.ENGINE_START_FAILED,
               FailureKind.UNREACHABLE, FailureKind.TIMEOUT)


class TextBuffer:
    """A pane's own text, when no model keeps it: appended parts, joined when read."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def __call__(self) -> str:
        if len(self.parts) > 1:
            self.parts[:] = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""

    def keep(self, chars: int) -> None:
        kept = self()[:chars]
        self.parts[:] = [kept] if kept else []


def text_source(source: Callable[[], str] | None) -> tuple[Callable[[], str], TextBuffer | None]:
    """``source`` as given (a model keeps the text), or a buffer of the pane's own."""
    if source is not None:
        return source, None
    buffer = TextBuffer()
    return buffer, buffer


class EditMarks:
    """Where the user's text went into a thinking trace (pause, edit, resume): highlighted, and said above it."""

    def __init__(self, view: QPlainTextEdit, note: QLabel) -> None:
        self.view, self.note = view, note
        self.edits: list[ThinkingEdit] = []

    def show(self, edits: Sequence[ThinkingEdit]) -> None:
        """Highlight the edits; nothing for no edits."""
        self.edits = list(edits)
        self.draw()
        if edits:
            self.note.setText(f"✎ You edited this thinking from character {edits[-1].at} (highlighted); the "
                              "model went on from your text. The history keeps both versions.")
        self.note.setVisible(bool(edits))

    def draw(self) -> None:
        """Drawn anew after each append: a selection ending where text goes in would grow with it."""
        marks = []
        end = self.view.document().characterCount() - 1
        for edit in self.edits:
            mark = QTextEdit.ExtraSelection()
            mark.format.setBackground(QColor("#d6ecff"))  # type: ignore[attr-defined]
            cursor = self.view.textCursor()
            cursor.setPosition(min(edit.at, end))
            cursor.setPosition(min(edit.at + len(edit.inserted), end), QTextCursor.MoveMode.KeepAnchor)
            mark.cursor = cursor  # type: ignore[attr-defined]
            marks.append(mark)
        self.view.setExtraSelections(marks)


class ThinkingPane(QFrame):
    """The model's thinking trace, streamed as plain text; shows tokens and seconds."""

    fold_changed = Signal(bool)
    continue_anyway = Signal()  # the user wants the reply without the loop guard's cut

    def __init__(self, parent: QWidget | None = None, source: Callable[[], str] | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ThinkingPane")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.header = QLabel("Thinking")
        self.header.setObjectName("ThinkingHeader")
        self.header.setWordWrap(True)
        self.toggle = QToolButton()
        self.toggle.setText("Hide")
        self.toggle.setCheckable(True)
        self.toggle.setToolTip("Fold or unfold the thinking trace")
        self.toggle.toggled.connect(self._on_toggled)
        self.view = QPlainTextEdit(readOnly=True)
        self.view.setObjectName("ThinkingText")
        self.view.setPlaceholderText("The model's reasoning streams here.")
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.view.setFont(mono)
        self.loop_note = QLabel()
        self.loop_note.setObjectName("LoopNote")
        self.loop_note.setWordWrap(True)
        self.loop_note.setStyleSheet("color: #8a5300;")
        self.continue_button = QPushButton("Continue anyway")
        self.continue_button.setToolTip("Go on from where the loop guard cut, with the guard off for this reply")
        self.continue_button.clicked.connect(self.continue_anyway)
        self.edit_note = QLabel()  # paused for an edit, or where the user edited this thinking
        self.edit_note.setObjectName("ThinkingEditNote")
        self.edit_note.setWordWrap(True)
        self.edit_note.setStyleSheet("color: #1f5f99;")
        self.edit_note.hide()
        top = QHBoxLayout()
        top.addWidget(self.header, 1)
        top.addWidget(self.toggle)
        loop_row = QHBoxLayout()
        loop_row.addWidget(self.loop_note, 1)
        loop_row.addWidget(self.continue_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(top)
        layout.addLayout(loop_row)
        layout.addWidget(self.edit_note)
        layout.addWidget(self.view, 1)
        self._source, self._own = text_source(source)
        self._block_len = 0
        self._started: float | None = None
        self._ended: float | None = None
        self.tokens = 0
        self.budget: int | None = None  # the chat's think budget, counted against in the header (None: none shown)
        self._budget_marked = False
        self.marks = EditMarks(self.view, self.edit_note)  # the user's edits, highlighted
        self.show_loop(None)

    def clear(self) -> None:
        if self._own is not None:
            self._own.keep(0)
        self._block_len = 0
        self.marks.show([])
        self.view.clear()
        self._started = self._ended = None
        self.tokens = 0
        self._budget_marked = False
        self.show_loop(None)
        self.set_folded(False)
        self._update_header()

    def append(self, text: str) -> None:
        if self._started is None:
            self._started = time.monotonic()
        if not text:
            return
        if self._own is not None:
            self._own.parts.append(text)
        cursor = self.view.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        for index, line in enumerate(text.split("\n")):
            if index:
                cursor.insertBlock()
                self._block_len = 0
            while self._block_len + len(line) > MAX_DISPLAY_BLOCK and " " in line:
                cut = line.find(" ", max(0, MAX_DISPLAY_BLOCK - self._block_len))
                if cut < 0:
                    break
                cursor.insertText(line[:cut])
                cursor.insertBlock()
                self._block_len, line = 0, line[cut + 1:]
            cursor.insertText(line)
            self._block_len += len(line)
        self.view.setTextCursor(cursor)
        self.view.ensureCursorVisible()
        if self.marks.edits:
            self.marks.draw()

    def text(self) -> str:
        return self._source()

    # ---- pause, edit, resume ----------------------------------------------------------------

    def set_editable(self, text: str | None) -> None:
        """Paused: ``text`` (the whole trace, as plain text: no display breaks) for the user to edit; None: the
        pane reads only again (the reply is drawn anew from its model)."""
        self.view.setReadOnly(text is None)
        self.view.setStyleSheet("" if text is None else "QPlainTextEdit { background: #fffbe6; }")
        if text is None:
            self.edit_note.hide()
            return
        self.view.setPlainText(text)
        self._block_len = len(text.rsplit("\n", 1)[-1])
        self.edit_note.setText("Paused: edit the thinking, or add a note at its end, then Resume (Esc drops it).")
        self.edit_note.show()
        cursor = self.view.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        self.view.setTextCursor(cursor)
        self.view.setFocus()

    def edited_text(self) -> str:
        """What the paused thinking reads now, as the user edited it."""
        return self.view.toPlainText()

    def show_loop(self, summary: str | None, collapse_from: int | None = None, copies: int = 0) -> None:
        """The loop guard's notice (None hides it). ``collapse_from``: the trace from there was the
        repeated span; it is replaced by one line saying so, and new text goes on after it."""
        self.loop_note.setText(summary or "")
        self.loop_note.setVisible(bool(summary))
        self.continue_button.setVisible(bool(summary))
        if collapse_from is None:
            return
        kept = self.text()[:collapse_from]
        if self._own is not None:
            self._own.keep(collapse_from)
        self.view.setPlainText(kept)
        cursor = self.view.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertBlock()
        cursor.insertText(f"⟲ [a passage repeated ×{copies}: collapsed by the loop guard]")
        cursor.insertBlock()
        self._block_len = 0
        self.view.setTextCursor(cursor)

    def set_tokens(self, tokens: int) -> None:
        self.tokens = tokens
        self._update_header()

    def set_budget(self, budget: int | None) -> None:
        """The chat's think budget (None, or unlimited: the header shows the count alone)."""
        self.budget = budget
        self._update_header()

    @property
    def budget_reached(self) -> bool:
        return self.budget is not None and 0 < self.budget <= self.tokens

    def end(self) -> None:
        if self._started is not None and self._ended is None:
            self._ended = time.monotonic()
        self._update_header()

    def _mark_budget(self) -> None:
        """The thinking ended on its budget: a line says so where it stopped (once; counts can come after the end)."""
        if self._budget_marked or not self.budget_reached or self._ended is None:
            return
        self._budget_marked = True
        cursor = self.view.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertBlock()
        cursor.insertText(BUDGET_REACHED)
        self._block_len = len(BUDGET_REACHED)

    def seconds(self) -> float:
        if self._started is None:
            return 0.0
        return (self._ended or time.monotonic()) - self._started

    def _update_header(self) -> None:
        counted = f"{self.tokens:,} / {self.budget:,}" if self.budget else f"{self.tokens:,}"
        mark = f" · {BUDGET_REACHED}" if self.budget_reached else ""
        self.header.setText(f"Thinking · {counted} tokens · {self.seconds():.1f} s{mark}")
        self._mark_budget()

    def set_folded(self, folded: bool) -> None:
        self.toggle.setChecked(folded)

    @property
    def folded(self) -> bool:
        return self.toggle.isChecked()

    def _on_toggled(self, folded: bool) -> None:
        self.view.setVisible(not folded)
        self.toggle.setText("Show" if folded else "Hide")
        self.fold_changed.emit(folded)


class PromptEdit(QPlainTextEdit):
    """Enter sends; Shift+Enter adds a newline; Up, while empty, asks to edit the last question. Files
    dropped or pasted on it are attached, not typed."""

    submitted = Signal()
    edit_last = Signal()  # Up in the empty prompt
    files_given = Signal(list)  # list[Path]: local files dropped or pasted

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("PromptEdit")
        self.setPlaceholderText("Ask something… (Enter sends, Shift+Enter adds a line)")
        self.setFixedHeight(72)

    @staticmethod
    def _local_files(source: QMimeData) -> list[Path]:
        return [Path(url.toLocalFile()) for url in source.urls() if url.isLocalFile()] if source.hasUrls() else []

    def canInsertFromMimeData(self, source: QMimeData) -> bool:
        return bool(self._local_files(source)) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:
        if files := self._local_files(source):
            self.files_given.emit(files)
        else:
            super().insertFromMimeData(source)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
                event.modifiers() & Qt.KeyboardModifier.ShiftModifier):
            self.submitted.emit()
            return
        if (event.key() == Qt.Key.Key_Up and event.modifiers() == Qt.KeyboardModifier.NoModifier
                and not self.toPlainText()):
            self.edit_last.emit()
            return
        super().keyPressEvent(event)


class ErrorBanner(QFrame):
    """Names the problem and offers the action that fixes it."""

    action_clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ErrorBanner")
        self.setStyleSheet("#ErrorBanner { background: #fdecea; border: 1px solid #e0a19b; border-radius: 4px; }"
                           "#ErrorBanner QLabel { color: #611a15; }")
        self.message = QLabel(wordWrap=True)
        self.message.setTextFormat(Qt.TextFormat.RichText)  # our bold line; the texts inside are escaped
        self._plain = ""
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.action = QPushButton()
        self.action.clicked.connect(self.action_clicked)
        self.dismiss = QToolButton()
        self.dismiss.setText("✕")
        self.dismiss.setToolTip("Dismiss")
        self.dismiss.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.addWidget(self.message, 1)
        layout.addWidget(self.action)
        layout.addWidget(self.dismiss)
        self.hide()

    def show_failure(self, failure: EngineFailure) -> None:
        """The failure's message and fix; the action is its known-good fallback, or a restart where that helps."""
        if failure.fallback:
            action: str | None = "Retry with " + failure.fallback.describe()
        else:
            action = "Restart engine" if failure.kind in RESTARTABLE else None
        self.show_problem(failure.message, failure.fix, action)

    def show_problem(self, problem: str, fix: str, action_text: str | None = None) -> None:
        # problem and fix can hold a server's error body, a model id, an MCP error: escaped, never markup
        self.message.setText(f"<b>{escaped(problem)}</b><br>{escaped(fix)}")
        self._plain = f"{problem}\n{fix}"
        self.action.setVisible(bool(action_text))
        self.action.setText(action_text or "")
        self.show()

    def text(self) -> str:
        """What the banner says, as the user reads it."""
        return self._plain
