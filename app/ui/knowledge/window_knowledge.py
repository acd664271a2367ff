"""The window's knowledge parts in one object: the chip above the prompt, the look-up before a send
(``asking``), the sources under the answer and the citations in it, and Knowledge… (the dialog).

The window builds it and hands it the session, the controller and the documents whose citations open sources (the
answer pane's, then the thread's); nothing here holds the window.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QWidget

from app.core.chat.answer_markup import cited_source
from app.core.chat.chat_settings import ChatSettings, effective
from app.core.chat.conversation import Conversation, Turn
from app.core.knowledge.db import KnowledgeUnavailable, knowledge_path
from app.core.knowledge.store import KnowledgeStore
from app.core.settings.settings import changed
from app.ui.chat.answer_view import AnswerDocument
from app.ui.controllers.chat_session import ChatSession
from app.ui.controllers.engine_controller import EngineController
from app.ui.knowledge.asking import MAX_KNOWLEDGE_TOKENS, KnowledgeAsking, chat_collections
from app.ui.knowledge.chip import KnowledgeChip
from app.ui.knowledge.dialog import KnowledgeDialog
from app.ui.knowledge.sources import SourcesPanel
from app.ui.knowledge.viewer import SourceViewer


class WindowKnowledge(QObject):
    """``chip``, ``sources`` (widgets the window lays out), ``asking`` (the send's look-up) and ``dialog`` (the
    open Knowledge… dialog, if any), over the index at ``store_path``."""

    def __init__(self, session: ChatSession, controller: EngineController, documents: tuple[AnswerDocument, ...],
                 parent: QWidget, store_path: Path | None = None) -> None:
        super().__init__(parent)
        self.session, self.controller, self.window = session, controller, parent
        self.store_path = store_path or knowledge_path()
        self.asking = KnowledgeAsking(self.store_path, self)
        self.sources = SourcesPanel(self.folders)
        self.chip = KnowledgeChip(self.names)
        self.dialog: KnowledgeDialog | None = None
        self._noted: tuple[Turn, str] | None = None  # the reply just started, and what its look-up said
        documents[0].citations = self.citations  # the answer pane's, read at each render: the turn shown now
        for document in documents:  # the answer pane's [n], and the thread's earlier answers' [n] and sources
            document.cite = self.cite
        self.chip.chosen.connect(self.choose)
        self.chip.manage.connect(self.open_dialog)
        session.reply_started.connect(self._note)
        session.reply.reset.connect(lambda _: self.show_turn())
        session.store.current_changed.connect(lambda _row: self.refresh())
        session.store.chat_settings_changed.connect(self.refresh)
        session.state_changed.connect(self.refresh)
        controller.settings_changed.connect(lambda _before, _after: self.refresh())

    @property
    def busy(self) -> bool:
        """A look-up runs: the send waits for it (a second Enter sends nothing)."""
        return self.asking.busy

    def citations(self) -> int:
        turn = self.session.store.last_turn
        return len(turn.knowledge.sources) if turn is not None and turn.knowledge is not None else 0

    def cite(self, href: str) -> SourceViewer | None:
        """A cited link's source in the viewer: ``nalar-cite:N`` the shown turn's, ``nalar-source:ID/N`` the
        shown branch's turn with that message id (an earlier answer's, saved with it); None where there is none."""
        if (cited := cited_source(href)) is None:
            return None
        message_id, number = cited
        if message_id is None:
            return self.sources.open_source(number)
        turn = next((t for t in self.session.conversation.turns if t.message_id == message_id), None)
        if turn is None or turn.knowledge is None or not 1 <= number <= len(turn.knowledge.sources):
            return None
        return self.sources.show_source(number, turn.knowledge.sources[number - 1])

    def _note(self, conversation: Conversation) -> None:
        """A reply starts (before its panes are drawn): what its question's look-up said goes with it."""
        last, self.asking.last = self.asking.last, None
        if last is not None and conversation.turns:
            self._noted = (conversation.turns[-1], last.note)
        self.show_turn()

    def show_turn(self) -> None:
        """The sources of the turn shown (or streaming); for the question just asked, why it went without."""
        turn = self.session.store.last_turn
        note = self._noted[1] if self._noted is not None and turn is self._noted[0] else ""
        self.sources.show_sources(turn.knowledge if turn is not None else None, note)

    def refresh(self) -> None:
        on = chat_collections(self.session.conversation, self.controller.settings)
        self.chip.show_chat(on, f"Passages take what the context has left, up to {MAX_KNOWLEDGE_TOKENS:,} tokens.")
        self.chip.setEnabled(not self.session.streaming)

    def choose(self, name: str, on: bool) -> None:
        """A collection ticked on or off for the chat shown: kept with the chat's values (its own preset copy)."""
        if self.session.streaming:
            return self.refresh()
        chat = effective(self.session.conversation.settings, self.controller.settings.presets)
        names = tuple(n for n in chat.values.knowledge if n != name) + ((name,) if on else ())
        self.session.store.set_chat_settings(ChatSettings(preset=chat.preset,
                                                          values=changed(chat.values, knowledge=names)))

    # ---- the index ---------------------------------------------------------------------------------

    def use_index(self, store_path: Path) -> None:
        """Another index than the data dir's (a bench's own, so the user's is never touched)."""
        self.store_path = self.asking.store_path = store_path

    def _collections(self) -> list[tuple[str, tuple[Path, ...]]]:
        """Each collection's name and folders; none when the index can't be opened (Knowledge… says why)."""
        try:
            store = KnowledgeStore(self.store_path)
        except KnowledgeUnavailable:
            return []
        try:
            return [(collection.name, collection.folders) for collection in store.collections()]
        finally:
            store.close()

    def names(self) -> list[str]:
        return [name for name, _folders in self._collections()]

    def folders(self, collection: str) -> tuple[Path, ...]:
        """The collection's folders as they are now (none: it is gone), for a source's Open file."""
        return next((folders for name, folders in self._collections() if name == collection), ())

    def open_dialog(self) -> KnowledgeDialog:
        """Knowledge…: one at a time, not modal (a sync can run while the user chats)."""
        if self.dialog is None:
            self.dialog = KnowledgeDialog(self.store_path, parent=self.window)
            self.dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            self.dialog.destroyed.connect(lambda: setattr(self, "dialog", None))
        self.dialog.show()
        self.dialog.activateWindow()
        return self.dialog
