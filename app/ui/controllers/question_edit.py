"""QuestionEdit: which earlier question the prompt holds, to send as a new branch at its place.

No widgets: the thread's Edit link (or Up in an empty prompt) begins an edit, the window's send takes it, and
showing another chat or branch ends it, so a question typed afterwards is never sent as an edit of a turn
no longer on screen.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.core.chat.conversation import Turn
from app.ui.controllers.conversation_store import ConversationStore


class QuestionEdit(QObject):
    """``turn`` is the turn whose question is being edited, or None: the prompt holds a new question."""

    changed = Signal(object)  # the index of that turn on the branch shown, or None: no edit

    def __init__(self, store: ConversationStore, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.turn: Turn | None = None
        store.current_changed.connect(lambda _row: self.cancel())  # another chat or branch: no edit of this one

    def begin(self, index: int, *, busy: bool = False) -> str | None:
        """Edit the question of the shown turn at ``index``: its text, which the next send replaces as a new
        branch there. None (and no edit) while a reply is under way or for no such turn."""
        turns = self.store.conversation.turns
        if busy or not 0 <= index < len(turns):
            return None
        self.turn = turns[index]
        self.changed.emit(index)
        return self.turn.user

    @property
    def index(self) -> int | None:
        """Where the question being edited is on the branch shown (None: no edit, or not on the branch shown)."""
        if self.turn is None or not len(self.store.model):
            return None
        return next((i for i, turn in enumerate(self.store.conversation.turns) if turn is self.turn), None)

    def cancel(self) -> None:
        if self.turn is not None:
            self.turn = None
            self.changed.emit(None)

    def take(self) -> int | None:
        """For a send: the index of the question being edited (its new branch's place); the edit ends."""
        index = self.index
        self.cancel()
        return index
