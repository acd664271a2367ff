"""ChatSession: the conversations and the reply being written, with no widgets.

It sends, regenerates, stops, saves partial replies every second and aborts on close. A reply that
calls tools goes through ``ToolLoop`` (approval, run, result) and on with a follow-up request that
carries the results. The window shows what it reports through its signals; tests drive it without a window.

It keeps no copy of a reply's text: while the reply runs, the engine keeps it (``EngineBase.reply_so_far``,
loop cuts and resumed text included); at its end, ``Finished`` carries it into the turn.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal
from qasync import asyncSlot

from app.core.chat.conversation import Conversation, ToolRound, ToolStep, Turn
from app.core.chat.history import HistoryStore
from app.core.models.model_families import model_family, sampling_warning
from app.core.settings.settings import SamplingConfig, changed
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import BackendChosen, EngineErrorEvent, Finished, LoopDetected, Metrics
from app.engine.requests import Resume
from app.ui.controllers.conversation_model import ConversationListModel
from app.ui.controllers.engine_controller import EngineController
from app.ui.controllers.tool_loop import ToolLoop
from app.ui.controllers.tools_controller import ToolsController

log = logging.getLogger(__name__)
PARTIAL_SAVE_MS = 1000
MAX_TOOL_ROUNDS = 8  # a model that keeps calling is asked for its answer (tool_choice "none") after this


class ChatSession(QObject):
    """The conversations (``self.model``), the current one, and at most one streaming reply."""

    current_changed = Signal(int)     # the row of the conversation now shown
    reply_started = Signal(object)    # the Conversation whose last turn is being answered
    thinking_delta = Signal(str)      # deltas of the current reply only
    answer_started = Signal()         # the first answer text is about to arrive
    answer_delta = Signal(str)
    thinking_tokens = Signal(int)
    backend_changed = Signal(str)     # which backend answers the current reply
    loop_detected = Signal(object)    # LoopDetected in the current reply
    notice = Signal(str)
    state_changed = Signal()          # a reply started or ended
    reply_finished = Signal(object)   # Finished, after the turn is updated and saved
    tool_round_started = Signal(object)  # ToolRound: the reply called tools (its thinking so far is in it)
    tool_step_changed = Signal(object)   # ToolStep: approved, running, answered
    reply_continued = Signal()        # the follow-up after the tool results starts streaming

    def __init__(self, controller: EngineController, history: HistoryStore, parent: QObject | None = None,
                 tools: ToolsController | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.history = history
        self.tools = tools
        self.tool_loop = ToolLoop(tools, self) if tools is not None else None
        self.tool_choice: Any = "auto"  # for a reply's first request; "required" or a named function forces a call
        self._answer_now_next = False  # Answer now pressed during a call: the follow-up skips its thinking
        self.model = ConversationListModel(self)
        self.current_row = -1
        self.current_request: str | None = None
        self._answer_started = False
        self._last_loops: dict[int | None, tuple[LoopDetected, ...]] = {}  # message id: what the guard did in its reply
        self._continued_after = ""  # the cut reply's loop record, while Continue anyway streams
        self._partial_timer = QTimer(self)
        self._partial_timer.setInterval(PARTIAL_SAVE_MS)
        self._partial_timer.timeout.connect(self.save_partial)
        bridge = controller.bridge
        bridge.thinking_delta.connect(self._on_thinking_delta)
        bridge.answer_delta.connect(self._on_answer_delta)
        bridge.metrics_updated.connect(self._on_metrics)
        bridge.backend_chosen.connect(self._on_backend_chosen)
        bridge.loop_detected.connect(self._on_loop_detected)
        bridge.finished.connect(self._on_finished)
        if self.tool_loop is not None:
            self.tool_loop.step_changed.connect(self._on_tool_step)
            self.tool_loop.round_done.connect(self._continue_after_tools)
            self.tool_loop.always_allowed.connect(self._always_allow)

    # ---- conversations -------------------------------------------------------------------------

    @property
    def conversation(self) -> Conversation:
        return self.model[max(0, self.current_row)]

    @property
    def streaming(self) -> bool:
        """A reply is under way: streaming, or waiting on its tool calls."""
        return self.current_request is not None or self.awaiting_tools

    @property
    def awaiting_tools(self) -> bool:
        return self.tool_loop is not None and self.tool_loop.active

    def reply_so_far(self) -> tuple[str, str] | None:
        """The streaming reply's thinking and answer, read where the engine keeps them; None when no request
        streams or the engine keeps none for it (not begun, or ended: its Finished is on its way)."""
        if self.current_request is None:
            return None
        texts = self.controller.bridge.engine.reply_so_far(self.current_request)
        return None if texts is None else (texts.thinking_text, texts.answer_text)

    @property
    def thinking_text(self) -> str:
        """What the current reply has thought so far, or the last reply's (from its turn)."""
        return self._texts()[0]

    @property
    def answer_text(self) -> str:
        return self._texts()[1]

    def _texts(self) -> tuple[str, str]:
        if (so_far := self.reply_so_far()) is not None:
            return so_far
        turns = self.conversation.turns if len(self.model) else []
        return (turns[-1].thinking, turns[-1].answer) if turns else ("", "")

    def load_history(self) -> None:
        """The stored conversations; the last one is shown, a new one if there are none."""
        for conversation in self.history.conversations():
            self.model.append(conversation)
        if not len(self.model):
            self.new_conversation()
        else:
            self.select(len(self.model) - 1)
        if self.history.interrupted:
            self.notice.emit(f"{self.history.interrupted} reply(s) were cut off when Nalar last closed "
                             "unexpectedly; what had arrived is kept, marked “interrupted”.")

    def select(self, row: int) -> None:
        if 0 <= row < len(self.model) and row != self.current_row and not self.streaming:
            self.current_row = row
            self.current_changed.emit(row)

    def new_conversation(self) -> None:
        conversation = Conversation(thinking=self.controller.settings.sampling.thinking)
        self.history.save_conversation(conversation)
        self.select(self.model.append(conversation))

    def rename(self, title: str) -> None:
        self.model.set_title(max(0, self.current_row), title)
        self.history.save_conversation(self.conversation)

    def set_thinking(self, on: bool) -> None:
        """The chat's Think switch, kept with the conversation."""
        self.conversation.thinking = on
        self.history.save_conversation(self.conversation)

    def set_tools(self, on: bool) -> None:
        """The chat's Tools switch, kept with the conversation."""
        self.conversation.tools = on
        self.history.save_conversation(self.conversation)

    def delete_current(self) -> None:
        row = self.current_row
        if row < 0 or self.streaming:
            return
        self.current_row = -1
        self.history.delete_conversation(self.model.remove(row).id)
        if not len(self.model):
            self.new_conversation()
        else:
            self.select(min(row, len(self.model) - 1))

    # ---- a reply -------------------------------------------------------------------------------

    async def send(self, text: str) -> None:
        text = text.strip()
        if not text or self.streaming or not self.controller.engine_ready:
            return
        conversation = self.conversation
        conversation.turns.append(Turn(user=text))
        if len(conversation.turns) == 1:
            conversation.title_from_first_message()
            self.rename(conversation.title)
        await self._run_reply(conversation)

    @asyncSlot()
    async def regenerate(self) -> None:
        """Answer the last question again; during a tool call, that call is dropped first."""
        conversation = self.conversation
        if self.awaiting_tools and self.tool_loop is not None:
            self.tool_loop.stop()
        if self.streaming or not conversation.turns or not self.controller.engine_ready:
            return
        conversation.turns[-1] = Turn(user=conversation.turns[-1].user)
        await self._run_reply(conversation)

    @asyncSlot()
    async def continue_past_loop(self) -> None:
        """The repetition was wanted: go on with the reply the guard cut, with the guard off for it.

        The reply goes on from where it was cut (the kept thinking after a thinking loop, the kept
        answer after an answer loop). An engine that can't resume (a remote server), or a reply with
        no cut, is answered again instead, with the guard off."""
        conversation = self.conversation
        if self.streaming or not conversation.turns or not self.controller.engine_ready:
            return
        turn = conversation.turns[-1]
        resume = self.resume_point(turn) if self.controller.bridge.engine.can_resume else None
        self._continued_after = turn.loop_guard or "a loop"
        if resume is None:
            conversation.turns[-1] = Turn(user=turn.user)
        await self._run_reply(conversation, self.controller.settings.sampling.with_loop_guard(enabled=False), resume)

    def resume_point(self, turn: Turn) -> Resume | None:
        """Where the last reply can go on, if the loop guard cut it (this session saw it finish)."""
        cut = [loop for loop in self._last_loops.get(turn.message_id, ()) if loop.outcome != "warned"]
        if not cut:
            return None
        phase = cut[-1].phase
        return Resume(phase, turn.thinking, turn.answer if phase == "answer" else "")

    async def _run_reply(self, conversation: Conversation, sampling: SamplingConfig | None = None,
                         resume: Resume | None = None) -> None:
        bridge = self.controller.bridge
        request_id = self._new_request()
        turn = conversation.turns[-1]
        self._last_loops.pop(turn.message_id, None)
        ready = bridge.ready
        turn.model, turn.kv_cache_dtype = (ready.model, ready.kv_cache_dtype) if ready else ("", "")
        turn.backend = bridge.engine.backend_name
        self.reply_started.emit(conversation)
        if resume is not None:  # the panes show the kept text again; the engine's deltas go on after it
            self._on_thinking_delta(request_id, resume.thinking)
            if resume.phase == "answer":
                self._on_answer_delta(request_id, resume.answer)
        self.backend_changed.emit(turn.backend)
        self.history.start_turn(conversation, turn)
        self._partial_timer.start()
        self.state_changed.emit()
        # This chat's Think switch, on whatever sampling this reply runs with (Continue anyway: guard warns).
        sampling = changed(sampling or self.controller.settings.sampling, thinking=conversation.thinking)
        if warning := sampling_warning(sampling, model_family(ready.model if ready else "")):
            self.notice.emit(warning)
        await self._generate(conversation, sampling, request_id, resume, self.tool_choice)

    def _new_request(self) -> str:
        request_id = uuid.uuid4().hex[:12]
        self.current_request = request_id
        self._answer_started = False
        return request_id

    async def _generate(self, conversation: Conversation, sampling: SamplingConfig, request_id: str,
                        resume: Resume | None, tool_choice: Any) -> None:
        """One request of the reply, with this chat's tools when its Tools switch is on."""
        bridge = self.controller.bridge
        offered = self._offered_tools(conversation)
        try:
            await bridge.generate(conversation.messages(), sampling, request_id, resume=resume,
                                  tools=[tool.openai() for tool in offered] or None,
                                  tool_choice=tool_choice if offered else None)
        except Exception as exc:  # the engine thread itself failed: still end the turn cleanly
            log.exception("generation crashed")
            bridge.post(EngineErrorEvent(request_id, EngineFailure(
                FailureKind.ENGINE_DIED, f"The engine failed: {exc}", "Restart the engine.")))
            # The engine's texts went with its generate(): the turn keeps what the last partial save kept.
            thinking, answer = self._last_saved(conversation.turns[-1])
            bridge.post(Finished(request_id, "error", thinking, answer))

    def _offered_tools(self, conversation: Conversation) -> list[Any]:
        if self.tools is None or not conversation.tools:
            return []
        return self.tools.offered(self.controller.settings.tools)

    @asyncSlot()
    async def stop(self) -> None:
        if self.awaiting_tools:
            self._stop_during_tools()
        elif self.current_request:
            await self.controller.bridge.abort(self.current_request)

    def answer_now(self) -> None:
        if self.awaiting_tools and self.tool_loop is not None:
            self._answer_now_next = True  # the calls get their results now; the follow-up answers at once
            self.tool_loop.answer_now()
        elif self.current_request:
            self.controller.bridge.answer_now(self.current_request)

    # ---- tool calls ----------------------------------------------------------------------------

    def _begin_tool_round(self, finished: Finished) -> None:
        """The reply called tools: keep what it thought, show the calls, and wait for the user (or run)."""
        assert self.tool_loop is not None
        turn = self.conversation.turns[-1]
        calls = [ToolStep(call.id, call.name, call.arguments) for call in finished.tool_calls]
        tool_round = ToolRound(finished.thinking_text, calls, finished.answer_text)
        turn.tool_rounds.append(tool_round)
        self.history.save_tool_rounds(turn)
        self.tool_round_started.emit(tool_round)
        self.tool_loop.begin(tool_round, self._offered_tools(self.conversation), self.controller.settings.tools)
        self.state_changed.emit()

    def _on_tool_step(self, step: ToolStep) -> None:
        if self.conversation.turns:
            self.history.save_tool_rounds(self.conversation.turns[-1])
        self.tool_step_changed.emit(step)

    def _always_allow(self, key: str) -> None:
        """"Always for this tool": saved like any settings change, through the one validated path."""
        settings = self.controller.settings
        if key not in settings.tools.always_allow:
            tools = changed(settings.tools, always_allow=(*settings.tools.always_allow, key))
            self.controller.apply_settings(changed(settings, tools=tools.model_dump()))

    @asyncSlot()
    async def _continue_after_tools(self) -> None:
        """Every call has its result: the reply goes on, with them in its messages."""
        conversation = self.conversation
        rounds = len(conversation.turns[-1].tool_rounds) if conversation.turns else 0
        request_id = self._new_request()
        self.reply_continued.emit()
        self.state_changed.emit()
        sampling = changed(self.controller.settings.sampling, thinking=conversation.thinking)
        # A forced call ("required" or a named function) is one round: the model then answers with what it got.
        forced = self.tool_choice not in ("auto", "none")
        tool_choice = "none" if self._answer_now_next or forced or rounds >= MAX_TOOL_ROUNDS else "auto"
        await self._generate(conversation, sampling, request_id, None, tool_choice)

    def _stop_during_tools(self) -> None:
        """Stop while calls wait or run: none of them runs on, and the turn ends as stopped."""
        assert self.tool_loop is not None
        self.tool_loop.stop()
        self._finish_turn(Finished("", "abort", "", ""))

    def _on_thinking_delta(self, request_id: str, text: str) -> None:
        if request_id == self.current_request:
            if self._answer_now_next:
                self._answer_now_next = False
                self.controller.bridge.answer_now(request_id)
            self.thinking_delta.emit(text)

    def _on_answer_delta(self, request_id: str, text: str) -> None:
        if request_id != self.current_request:
            return
        if not self._answer_started:
            self._answer_started = True
            self.answer_started.emit()
        self.answer_delta.emit(text)

    def _on_metrics(self, metrics: Metrics) -> None:
        if metrics.request_id == self.current_request:
            self.thinking_tokens.emit(metrics.thinking_tokens)

    def _on_backend_chosen(self, event: BackendChosen) -> None:
        if event.request_id != self.current_request or not self.conversation.turns:
            return
        self.conversation.turns[-1].backend = event.backend
        self.backend_changed.emit(event.backend)
        if event.reason:
            self.notice.emit(f"Answered by {event.backend}: {event.reason}.")

    def _on_loop_detected(self, event: LoopDetected) -> None:
        if event.request_id == self.current_request:
            self.loop_detected.emit(event)

    def _on_finished(self, finished: Finished) -> None:
        if finished.request_id != self.current_request:
            return
        self.current_request = None
        if finished.reason == "tool_calls" and finished.tool_calls and self.tool_loop is not None:
            self._begin_tool_round(finished)
            return
        self._finish_turn(finished)

    def _finish_turn(self, finished: Finished) -> None:
        self._answer_now_next = False
        turn = self.conversation.turns[-1]
        turn.thinking, turn.answer, turn.finish_reason = finished.thinking_text, finished.answer_text, finished.reason
        turn.loop_guard = "\n".join(loop.summary() for loop in finished.loops)
        if self._continued_after:  # what was cut stays on record, with what the user chose
            turn.loop_guard = "\n".join(filter(None, [self._continued_after, "continued anyway, guard off",
                                                       turn.loop_guard]))
            self._continued_after = ""
        self._last_loops[turn.message_id] = finished.loops
        if finished.metrics is not None:
            m = finished.metrics
            turn.thinking_tokens, turn.answer_tokens, turn.ttft_s = m.thinking_tokens, m.answer_tokens, m.ttft_s
            turn.answer_tok_s = m.answer_tok_s
            self.thinking_tokens.emit(m.thinking_tokens)
        self._partial_timer.stop()
        self.history.finish_turn(turn)
        if finished.reason == "abort":
            self.notice.emit("Stopped. The partial reply is kept.")
        elif finished.reason == "loop":
            self.notice.emit("The loop guard cut this reply where it began to repeat itself.")
        self.state_changed.emit()
        self.reply_finished.emit(finished)

    def save_partial(self) -> None:
        """Every second while a reply streams: a crash then loses at most about a second of it."""
        if self.conversation.turns and (so_far := self.reply_so_far()) is not None:
            self.history.save_partial(self.conversation.turns[-1], *so_far)

    def _last_saved(self, turn: Turn) -> tuple[str, str]:
        row = self.history.message_row(turn.message_id) if turn.message_id is not None else {}
        return row.get("thinking_text", ""), row.get("answer_text", "")

    def close(self) -> None:
        """Abort what streams and keep what arrived, marked "abort"; late events are ignored after this."""
        self._partial_timer.stop()
        if self.awaiting_tools and self.tool_loop is not None:
            self.tool_loop.stop()
            turn = self.conversation.turns[-1]
            turn.finish_reason = "abort"
            self.history.finish_turn(turn)
        if self.current_request:
            engine = self.controller.bridge.engine
            turn = self.conversation.turns[-1]
            # None: its Finished is on its way through the bridge; the last partial save is at most a second old.
            turn.thinking, turn.answer = self.reply_so_far() or self._last_saved(turn)
            engine.loop_thread.submit(engine.abort(self.current_request))
            turn.finish_reason = "abort"
            self.history.finish_turn(turn)
            self.current_request = None
