"""What the window does to conversations beyond a reply: rename and delete them, and act on the thread's
links and the branch actions (another try of a turn: the navigator, Alt+Left/Right), with the context gauge
kept on the branch shown.

The state is the conversation's (its shown leaf, in core's Qt-free ``Conversation``) and the store's; this
object only turns a click or a key into a call on them, asks before what can't be undone, and draws what
follows in the gauge.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QInputDialog, QMessageBox, QWidget

from app.core.chat.conversation import Conversation
from app.core.chat.history_search import SearchHit
from app.core.steering.kept_thinking import KeepSwitch, counted_texts, keep_switches, toggle
from app.ui.chat.attachments_bar import branch_tokens, model_counter
from app.ui.chat.chat_view import ChatView
from app.ui.chat.gauges import GaugeBar
from app.ui.chat.panes import PromptEdit
from app.ui.controllers.chat_session import ChatSession
from app.ui.controllers.engine_controller import EngineController
from app.ui.controllers.operations import TokenCounts

STEPS = {"prev": -1, "next": +1}


class ConversationActions(QObject):
    """The window's conversation commands and thread links (``ChatView.turn_action``), on the shown chat.

    The window hands over what they act on: the session, the controller (the context the gauge measures against),
    the thread, the prompt an edit goes into, the gauges and its notice line; ``parent`` owns the questions asked.
    """

    def __init__(self, session: ChatSession, controller: EngineController, chat_view: ChatView, prompt: PromptEdit,
                 gauges: GaugeBar, show_notice: Callable[[str], object], parent: QWidget) -> None:
        super().__init__(parent)
        self.parent_widget, self.session, self.controller = parent, session, controller
        self.chat_view, self.prompt, self.gauges, self.show_notice = chat_view, prompt, gauges, show_notice
        self.store = session.store
        self.question_edit = session.question_edit
        chat_view.turn_action.connect(self.on_turn_action)
        chat_view.keep_switches = self.keep_switches
        self.counts = TokenCounts(self)  # the switches' and the gauge's, off the GUI thread when long

    def rename(self) -> None:
        title, ok = QInputDialog.getText(self.parent_widget, "Rename conversation", "Title:",
                                         text=self.store.conversation.title)
        if ok and title.strip():
            self.store.rename(title.strip())

    def delete(self) -> None:
        conversation = self.store.conversation
        if conversation.turns and QMessageBox.question(
                self.parent_widget, "Delete conversation",
                f"Delete “{conversation.title}”?") != QMessageBox.StandardButton.Yes:
            return
        self.store.delete_current()

    def on_turn_action(self, index: int, action: str) -> None:
        if action in STEPS:
            self.store.switch_branch(index, STEPS[action])
        elif action == "edit":
            self.edit(index)
        elif action == "fork":
            self.store.fork(index)
        elif action == "delete":
            self.delete_branch(index)
        elif action == "keep":
            self.toggle_keep_thinking(index)

    def keep_switches(self, conversation: Conversation) -> list[KeepSwitch | None]:
        """Each earlier turn's "keep its thinking" switch, its cost in the model's tokens and the context left."""
        settings = self.controller.settings
        ready = self.controller.bridge.ready
        if not any(turn.thinking.strip() for turn in conversation.turns[:-1]):
            return [None] * len(conversation.turns)  # no switch: nothing to count
        counter = model_counter(settings)
        context = ready.max_model_len if ready is not None else settings.engine.max_model_len
        # Not counted yet (a reopened chat's long answer, the tokenizer not read): "counting tokens…" until it is.
        self.counts.counted(counter, "switches", counted_texts(conversation), self.chat_view.redraw_thread)
        return keep_switches(conversation, counter.known, context, estimate=not counter.exact)

    def toggle_keep_thinking(self, index: int) -> None:
        """Whether later prompts hold this turn's thinking; kept with the turn, shown, and counted in the gauge."""
        conversation = self.store.conversation
        if self.session.streaming or not 0 <= index < len(conversation.turns) - 1:
            return
        toggle(turn := conversation.turns[index])
        self.store.history.set_keep_thinking(turn)
        self.store.current_changed.emit(self.store.current_row)

    def delete_branch(self, index: int) -> None:
        """This turn and all that follows it on every branch below it; its other tries stay, one of them shown."""
        conversation = self.store.conversation
        if self.session.streaming or not 0 <= index < len(conversation.turns):
            return
        _place, tries = conversation.siblings(index)
        below = "the turns after it" if index < len(conversation.turns) - 1 else "its reply"
        if QMessageBox.question(
                self.parent_widget, "Delete this branch",
                f"Delete question {index + 1}, {below} and every branch below it? "
                f"{'Its other tries stay.' if tries > 1 else 'The turns before it stay.'}"
        ) == QMessageBox.StandardButton.Yes:
            self.store.delete_branch(index)

    def edit(self, index: int) -> None:
        """The question at ``index`` goes into the prompt; sending it makes a new branch there."""
        if (text := self.question_edit.begin(index, busy=self.session.streaming)) is not None:
            prompt = self.prompt
            prompt.setPlainText(text)
            prompt.moveCursor(prompt.textCursor().MoveOperation.End)
            prompt.setFocus()

    def edit_last(self) -> None:
        """Up in an empty prompt (or the menu): edit the last question of the branch shown."""
        if turns := self.store.conversation.turns:
            self.edit(len(turns) - 1)

    def cancel_edit(self) -> None:
        self.question_edit.cancel()
        self.prompt.clear()

    def open_hit(self, hit: SearchHit) -> None:
        """A search result: its conversation, on the branch that holds its message, scrolled to it."""
        if self.session.streaming:
            self.show_notice("A reply is under way: the result opens once it ends (or is stopped).")
            return
        if (index := self.store.open_message(hit.conversation_id, hit.message_id)) is not None:
            self.chat_view.scroll_to_turn(index)

    def switch_newest(self, step: int) -> bool:
        """Alt+Left/Right: the previous or next try of the newest turn that has others (usually the last reply)."""
        index = self.store.conversation.newest_branch_point()
        return index is not None and self.store.switch_branch(index, step)

    def show_context(self) -> None:
        """The context gauge follows the branch shown: what the model will read on the next send."""
        controller = self.controller
        if not controller.engine_ready or controller.bridge.ready is None:
            return
        counter = model_counter(controller.settings)
        conversation = self.store.conversation
        counted = self.counts.counted(counter, "gauge", counted_texts(conversation), self.show_context)
        self.gauges.show_context(branch_tokens(conversation, counter) if counted else None,
                                 controller.bridge.ready.max_model_len, estimate=not counter.exact)
