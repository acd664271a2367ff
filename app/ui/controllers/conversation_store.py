"""ConversationStore: the conversations (``model``), which one is shown, and every write to the history.

No widgets: it adds, renames, deletes and selects conversations, keeps each chat's switches,
and saves a reply's turn as it starts, streams, calls tools and ends (through ``HistoryStore``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.core.chat.chat_settings import ChatSettings
from app.core.chat.conversation import Conversation, Turn, TurnKnowledge
from app.core.chat.history import HistoryStore, add_conversations_at
from app.core.chat.history_import import Imported, read_import
from app.core.chat.images import ImagePart
from app.engine.events import Finished
from app.ui.controllers.conversation_model import ConversationListModel
from app.ui.controllers.operations import Operation, run_blocking


class ConversationStore(QObject):
    """``busy()`` says a reply is under way: the shown conversation may then not change or go."""

    current_changed = Signal(int)  # the row of the conversation now shown
    notice = Signal(str)
    chat_settings_changed = Signal()  # the shown chat's own values (preset, budget, collections) were set
    import_progress = Signal(str)  # what an import is doing, emitted from its worker thread (queued to receivers)

    def __init__(self, history: HistoryStore, busy: Callable[[], bool], new_thinking: Callable[[], bool],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.history = history
        self.model = ConversationListModel(self)
        self.current_row = -1
        self._busy = busy
        self._new_thinking = new_thinking  # a new chat's Think switch starts as the settings say
        self._unread: set[str] = set()  # listed, turns not read yet

    @property
    def conversation(self) -> Conversation:
        return self.read(max(0, self.current_row))

    def read(self, row: int) -> Conversation:
        """The conversation at ``row`` with its turns: the list holds titles only until a chat is shown."""
        conversation = self.model[row]
        if conversation.id in self._unread:
            self._unread.discard(conversation.id)
            for full in self.history.conversations([conversation.id]):
                self.model.replace(row, full)
                conversation = full
        return conversation

    @property
    def last_turn(self) -> Turn | None:
        turns = self.conversation.turns if len(self.model) else []
        return turns[-1] if turns else None

    def load_history(self) -> None:
        """The stored conversations, their titles only (10,000 chats' turns took 2.9 s to read); the last one is
        shown, a new one if there are none."""
        listed = self.history.conversations(turns=False)
        self._unread = {conversation.id for conversation in listed}
        self.model.extend(listed)
        if not len(self.model):
            self.new_conversation()
        else:
            self.select(len(self.model) - 1)
        if self.history.interrupted:
            self.notice.emit(f"{self.history.interrupted} reply(s) were cut off when Nalar last closed "
                             "unexpectedly; what had arrived is kept, marked “interrupted”.")

    def select(self, row: int) -> None:
        if 0 <= row < len(self.model) and row != self.current_row and not self._busy():
            self.read(row)
            self.current_row = row
            self.current_changed.emit(row)

    def new_conversation(self) -> None:
        conversation = Conversation(thinking=self._new_thinking())
        self.history.save_conversation(conversation)
        self.select(self.model.append(conversation))

    def rename(self, title: str) -> None:
        self.model.set_title(max(0, self.current_row), title)
        self.history.save_conversation(self.conversation)

    def set_switches(self, *, thinking: bool | None = None, tools: bool | None = None) -> None:
        """The chat's Think and Tools switches (those given), kept with the conversation."""
        self.conversation.thinking = self.conversation.thinking if thinking is None else thinking
        self.conversation.tools = self.conversation.tools if tools is None else tools
        self.history.save_conversation(self.conversation)

    def set_chat_settings(self, settings: ChatSettings, *, thinking: bool | None = None,
                          tools: bool | None = None) -> None:
        """The chat's own preset values (a snapshot), kept with it, and its switches if given (a preset was
        chosen: they take its Think and Tools)."""
        conversation = self.conversation
        conversation.settings = settings
        conversation.thinking = conversation.thinking if thinking is None else thinking
        conversation.tools = conversation.tools if tools is None else tools
        self.history.save_conversation(conversation)
        self.chat_settings_changed.emit()

    def delete_current(self) -> None:
        row = self.current_row
        if row < 0 or self._busy():
            return
        self.current_row = -1
        self.history.delete_conversation(self.model.remove(row).id)
        if not len(self.model):
            self.new_conversation()
        else:
            self.select(min(row, len(self.model) - 1))

    # ---- branches -------------------------------------------------------------------------------

    def switch_branch(self, index: int, step: int) -> bool:
        """The previous (-1) or next (+1) try of the shown turn at ``index``, remembered as the one shown."""
        if self._busy() or not self.conversation.switch_branch(index, step):
            return False
        self.history.set_leaf(self.conversation)
        self.current_changed.emit(self.current_row)
        return True

    def delete_branch(self, index: int) -> None:
        """The shown turn at ``index`` and all that follows it on every branch; its siblings stay."""
        if self._busy() or not 0 <= index < len(self.conversation.turns):
            return
        root = self.conversation.delete_branch(index)[0]
        self.history.delete_turns(root, self.conversation)
        self.current_changed.emit(self.current_row)

    def fork(self, index: int) -> None:
        """"New chat from here": the shown branch up to the turn at ``index`` as a new conversation, shown."""
        if self._busy() or not 0 <= index < len(self.conversation.turns):
            return
        forked = self.conversation.fork(index)
        self.history.add_conversations([forked])
        self.select(self.model.append(forked))

    def open_message(self, conversation_id: str, message_id: int | None) -> int | None:
        """Show a conversation (a search result) on the branch that holds its message ``message_id`` (None: as
        it was shown), remembered as the one shown. The message's index on that branch, or None: not opened."""
        row = next((r for r in range(len(self.model)) if self.model[r].id == conversation_id), None)
        if row is None or self._busy():
            return None
        conversation = self.read(row)
        turn = next((t for t in conversation.tree if message_id is not None and t.message_id == message_id), None)
        if turn is not None and turn not in conversation.turns:
            conversation.show(turn)
            self.history.set_leaf(conversation)
            if row == self.current_row:
                self.current_changed.emit(row)
        self.select(row)
        return conversation.turns.index(turn) if turn is not None else None

    def import_file(self, path: Path) -> Operation[Imported]:
        """Conversations from a file (Nalar's JSON export, or a message list): read, checked and stored on a worker
        thread, with its own connection and one transaction (16,000 turns took 16.7 s on the GUI thread); then
        listed, the last one shown. A bad file fails the operation with ImportProblem, and nothing is stored."""
        target, busy_timeout_s = self.history.path, self.history.busy_timeout_s

        def work() -> Imported:
            self.import_progress.emit(f"Importing {path.name}: reading and checking it…")
            imported = read_import(path)
            self.import_progress.emit(f"Importing {path.name}: storing {len(imported.conversations)} "
                                      f"conversation(s), {imported.turns:,} turns…")
            add_conversations_at(target, imported.conversations, busy_timeout_s)
            return imported

        return run_blocking(f"Importing {path.name}", work, parent=self).success(self._list_imported)

    def _list_imported(self, imported: Imported) -> None:
        for conversation in imported.conversations:
            row = self.model.append(conversation)
        if imported.conversations and not self._busy():
            self.select(row)
        for note in imported.notes:
            self.notice.emit(note)

    # ---- the turn being answered ---------------------------------------------------------------

    def add_question(self, text: str, edit_at: int | None = None, images: tuple[ImagePart, ...] = (),
                     knowledge: TurnKnowledge | None = None) -> Conversation:
        """The user's question as the shown conversation's new last turn, or the question at ``edit_at`` edited
        (a new sibling there: the old branch stays, and its images unless new ones come; the passages are this
        question's). The first question names the chat."""
        conversation = self.conversation
        if edit_at is not None:
            turn = conversation.branch_at(edit_at, text)
            turn.images, turn.knowledge = images or turn.images, knowledge
            return conversation
        conversation.add_turn(Turn(user=text, images=images, knowledge=knowledge))
        if len(conversation.turns) == 1:
            conversation.title_from_first_message()
            self.rename(conversation.title)
        return conversation

    def start_turn(self, turn: Turn) -> None:
        self.history.start_turn(self.conversation, turn)

    def save_partial(self, thinking: str, answer: str) -> None:
        if (turn := self.last_turn) is not None:
            self.history.save_partial(turn, thinking, answer)

    def save_tool_rounds(self) -> None:
        if (turn := self.last_turn) is not None:
            self.history.save_tool_rounds(turn)

    def end_turn(self, finished: Finished, backend: str) -> Turn:
        """The last turn as its reply ended (texts, reason, backend, counts), saved."""
        turn = self.conversation.turns[-1]
        turn.thinking, turn.answer, turn.finish_reason = finished.thinking_text, finished.answer_text, finished.reason
        turn.backend = backend
        if (m := finished.metrics) is not None:
            turn.thinking_tokens, turn.answer_tokens, turn.ttft_s = m.thinking_tokens, m.answer_tokens, m.ttft_s
            turn.answer_tok_s = m.answer_tok_s
        self.history.finish_turn(turn)
        return turn
