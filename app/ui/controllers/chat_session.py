"""ChatSession: the reply being written, wired to the conversations, the tool rounds and the engine.

Each job has its own object: ``store`` (ConversationStore) the conversations and their saving, ``reply``
(core's Qt-free Reply) the reply's text and state, which the panes observe and ``feed`` (ReplyFeed) fills
from the bridge, ``tool_loop`` (ToolLoop) a reply's tool rounds and their bounds, ``question_edit``
(QuestionEdit) the earlier question the prompt holds, which a send makes a new branch. The session sends,
regenerates, stops, saves partial replies every second and aborts on close; tests drive it without a window.
"""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import QObject, QTimer, Signal
from qasync import asyncSlot

from app.core.chat.chat_settings import chat_messages, chat_sampling, effective
from app.core.chat.conversation import Conversation, ToolStep, TurnKnowledge
from app.core.chat.history import HistoryStore
from app.core.chat.images import ImagePart
from app.core.chat.reply import Reply
from app.core.models.model_families import model_family, sampling_warning
from app.core.settings.settings import SamplingConfig, changed
from app.core.steering.thinking_pause import PAUSED, ThinkingPause
from app.engine.events import Finished
from app.engine.requests import Resume, ToolChoice
from app.tools.mcp_client import ToolInfo
from app.ui.controllers.continuations import ReplyContinuations
from app.ui.controllers.conversation_store import ConversationStore
from app.ui.controllers.engine_controller import EngineController
from app.ui.controllers.question_edit import QuestionEdit
from app.ui.controllers.reply_feed import LoopRecord, ReplyFeed
from app.ui.controllers.tool_loop import ToolLoop
from app.ui.controllers.tools_controller import ToolsController

PARTIAL_SAVE_MS = 1000


class ChatSession(ReplyContinuations, QObject):
    """The conversations (``store``), the reply in the panes (``reply``), and at most one streaming request."""

    reply_started = Signal(object)    # the Conversation whose last turn is being answered
    notice = Signal(str)
    state_changed = Signal()          # a reply started or ended, or waits on its calls
    reply_finished = Signal(object)   # Finished, after the turn is updated and saved

    def __init__(self, controller: EngineController, history: HistoryStore, parent: QObject | None = None,
                 tools: ToolsController | None = None) -> None:
        super().__init__(parent)
        self.controller, self.tools = controller, tools
        self.store = ConversationStore(history, lambda: self.streaming, lambda: controller.settings.sampling.thinking,
                                       self)
        self.question_edit = QuestionEdit(self.store, self)  # an earlier question the prompt holds, if any
        self.reply = Reply()
        self.feed = ReplyFeed(controller.bridge, self.reply, self)
        self.tool_loop = ToolLoop(tools, self) if tools is not None else None
        self.tool_choice: ToolChoice = "auto"  # a reply's first request; "required" or a named function forces
        self._loops = LoopRecord()
        self.pause = ThinkingPause()  # pause, edit, resume (ReplyContinuations)
        self._partial_timer = QTimer(self)
        self._partial_timer.setInterval(PARTIAL_SAVE_MS)
        self._partial_timer.timeout.connect(self.save_partial)
        self.store.notice.connect(self.notice)
        self.store.current_changed.connect(lambda _row: self.reply.load(self.store.last_turn))
        self.store.current_changed.connect(lambda _row: self.end_pause())
        self.feed.finished.connect(self._on_finished)
        self.feed.notice.connect(self.notice)
        if self.tool_loop is not None:
            self.tool_loop.step_changed.connect(self._on_tool_step)
            self.tool_loop.round_done.connect(self._continue_after_tools)
            self.tool_loop.always_allowed.connect(lambda key: always_allow(controller, key))
            self.tool_loop.notice.connect(self.notice)

    @property
    def conversation(self) -> Conversation:
        return self.store.conversation

    @property
    def history(self) -> HistoryStore:
        return self.store.history

    @property
    def streaming(self) -> bool:
        """A reply is under way: streaming, or waiting on its tool calls."""
        return self.feed.request is not None or self.awaiting_tools

    @property
    def awaiting_tools(self) -> bool:
        return self.tool_loop is not None and self.tool_loop.active

    async def send(self, text: str, edit_at: int | None = None, images: tuple[ImagePart, ...] = (),
                   knowledge: TurnKnowledge | None = None) -> None:
        """A new question after the shown leaf, or the question at ``edit_at`` edited: a new branch there."""
        if (text := text.strip()) and not self.streaming and self.controller.engine_ready:
            await self._run_reply(self.store.add_question(text, edit_at, images, knowledge))

    @asyncSlot()
    async def regenerate(self) -> None:
        """Answer the last question again as a sibling reply (the old one stays); a pending call is dropped."""
        conversation = self.conversation
        if self.awaiting_tools and self.tool_loop is not None:
            self.tool_loop.stop()
        if self.streaming or not conversation.turns or not self.controller.engine_ready:
            return
        conversation.branch_at(len(conversation.turns) - 1)
        await self._run_reply(conversation)

    async def _run_reply(self, conversation: Conversation, sampling: SamplingConfig | None = None,
                         resume: Resume | None = None) -> None:
        bridge = self.controller.bridge
        self.feed.new_request()
        turn = conversation.turns[-1]
        self._loops.forget(turn)
        self.pause.end()  # a resume has taken its edit already; a new question or a regenerate drops one
        ready = bridge.ready
        turn.model, turn.kv_cache_dtype = (ready.model, ready.kv_cache_dtype) if ready else ("", "")
        turn.backend = bridge.engine.backend_name
        self.reply_started.emit(conversation)
        # With a resume, the panes show the kept text again; the engine's deltas go on after it.
        kept = (resume.thinking, resume.answer if resume.phase == "answer" else "") if resume else ("", "")
        self.reply.edits = list(turn.thinking_edits)
        self.reply.begin(turn.backend, *kept)
        presets = self.controller.settings.presets
        chat = conversation.settings = effective(conversation.settings, presets)  # frozen at its first reply
        self.store.start_turn(turn)
        self._partial_timer.start()
        self.state_changed.emit()
        # This chat's values and Think switch, on whatever sampling this reply runs with (Continue anyway: guard warns).
        sampling = chat_sampling(chat, conversation.thinking, sampling or self.controller.settings.sampling, presets)
        if warning := sampling_warning(sampling, model_family(ready.model if ready else "")):
            self.notice.emit(warning)
        await self._generate(conversation, sampling, resume, self.tool_choice)

    async def _generate(self, conversation: Conversation, sampling: SamplingConfig, resume: Resume | None,
                        tool_choice: ToolChoice) -> None:
        """The request under way, with this chat's tools when its Tools switch is on."""
        offered = self._offered_tools(conversation)
        if self.tool_loop is not None:  # calls sent back for a request that allowed none never run
            self.tool_loop.sent_choice = tool_choice if offered else None
        messages = chat_messages(conversation.settings, conversation.messages(),  # the preset's system prompt first
                                 self.controller.settings.presets)
        await self.feed.run(messages, sampling, resume, [tool.openai() for tool in offered] or None,
                            tool_choice if offered else None)

    def _offered_tools(self, conversation: Conversation) -> list[ToolInfo]:
        if self.tools is None or not conversation.tools:
            return []
        return self.tools.offered(self.controller.settings.tools)

    @asyncSlot()
    async def stop(self) -> None:
        if self.pause.state != "off":  # Esc while paused: the edit is dropped (a pausing request is stopping)
            self.end_pause()
        elif self.awaiting_tools and self.tool_loop is not None:  # no call runs on; the turn ends as stopped
            self.tool_loop.stop()
            self._finish_turn(Finished("", "abort", "", ""))
        elif self.feed.request:
            await self.controller.bridge.abort(self.feed.request)

    def answer_now(self) -> None:
        if self.awaiting_tools and self.tool_loop is not None:
            self.feed.answer_now_next = True  # the calls get their results now; the follow-up answers at once
            self.tool_loop.answer_now()
        elif self.feed.request:
            self.controller.bridge.answer_now(self.feed.request)

    def _on_tool_step(self, step: ToolStep) -> None:
        self.store.save_tool_rounds()
        self.reply.update_step(step)

    @asyncSlot()
    async def _continue_after_tools(self) -> None:
        """Every call has its result: the reply goes on, with them in its messages."""
        assert self.tool_loop is not None
        conversation = self.conversation
        self.feed.new_request()
        self.reply.continue_after_tools()
        self.state_changed.emit()
        sampling = chat_sampling(conversation.settings, conversation.thinking, self.controller.settings.sampling,
                                 self.controller.settings.presets)
        rounds = len(conversation.turns[-1].tool_rounds)
        choice = self.tool_loop.next_choice(self.tool_choice, rounds, self.feed.answer_now_next)
        await self._generate(conversation, sampling, None, choice)

    def _on_finished(self, finished: Finished) -> None:
        """A request ended. With tool calls, the turn keeps what it thought, and the calls wait for the user
        (or run), unless Nalar's bounds refuse them: each then has that as its result, and the reply ends."""
        if finished.reason != "tool_calls" or not finished.tool_calls or self.tool_loop is None:
            self._finish_turn(finished)
            return
        turn = self.conversation.turns[-1]
        refused = self.tool_loop.take(turn, finished, self._offered_tools(self.conversation),
                                      self.controller.settings.tools)
        self.store.save_tool_rounds()
        self.reply.add_round(turn.tool_rounds[-1])
        if refused:  # the reply's text is in its last round, as after a Stop during the calls
            self._finish_turn(dataclasses.replace(finished, thinking_text="", answer_text=""))
        else:
            self.state_changed.emit()

    def _finish_turn(self, finished: Finished) -> None:
        self.feed.answer_now_next = False
        self._partial_timer.stop()
        self._loops.record(self.conversation.turns[-1], finished.loops)
        turn = self.store.end_turn(finished, self.reply.backend)
        if finished.metrics is not None:
            self.reply.count_tokens(turn.thinking_tokens)
        self.reply.finish(finished.reason, turn.thinking, turn.answer)
        if self.pause.took_hold(finished.reason, turn):
            self.notice.emit(PAUSED)
        elif finished.reason == "abort":
            self.notice.emit("Stopped. The partial reply is kept.")
        elif finished.reason == "loop":
            self.notice.emit("The loop guard cut this reply where it began to repeat itself.")
        elif finished.reason == "length":
            self.notice.emit("The reply reached its token limit. Continue goes on from where it stopped.")
        self.note_prefix_cache(finished)
        self.state_changed.emit()
        self.reply_finished.emit(finished)

    def save_partial(self) -> None:
        """Every second while a request streams: a crash then loses at most about a second of it."""
        if self.feed.request is not None:
            self.store.save_partial(self.reply.thinking, self.reply.answer)

    def close(self) -> None:
        """Abort what streams and keep what arrived, marked "abort"; late events are ignored after this."""
        self._partial_timer.stop()
        if (turn := self.store.last_turn) is None or not self.streaming:
            return
        texts = (turn.thinking, turn.answer) if self.awaiting_tools else (self.reply.thinking, self.reply.answer)
        if self.tool_loop is not None:
            self.tool_loop.stop()
        if self.feed.request:
            engine = self.controller.bridge.engine
            engine.loop_thread.submit(engine.abort(self.feed.request))
            self.feed.request = None
        self.store.end_turn(Finished("", "abort", *texts), self.reply.backend)


def always_allow(controller: EngineController, key: str) -> None:
    """"Always for this tool": saved like any settings change, through the one validated path."""
    settings = controller.settings
    if key not in settings.tools.always_allow:
        tools = changed(settings.tools, always_allow=(*settings.tools.always_allow, key))
        controller.apply_settings(changed(settings, tools=tools.model_dump()))
