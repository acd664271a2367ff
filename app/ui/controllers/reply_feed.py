"""ReplyFeed: the request under way, sent through the bridge, its events fed straight into the ``Reply`` model.

The bridge already joins deltas per frame; the feed only drops what belongs to an older request (a
stopped or replaced one) and turns the engine's events into the model's changes. ``LoopRecord`` keeps
what the loop guard did in each reply, for Continue anyway and the history.
"""

from __future__ import annotations

import logging
import uuid

from PySide6.QtCore import QObject, Signal

from app.core.chat.conversation import Message, Turn
from app.core.chat.reply import LoopNote, Reply
from app.core.settings.settings import SamplingConfig
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import BackendChosen, EngineErrorEvent, Finished, LoopDetected, Metrics
from app.engine.requests import Resume, ToolChoice, Tools
from app.ui.controllers.bridge import EngineBridge

log = logging.getLogger(__name__)


class ReplyFeed(QObject):
    """``request``: the id of the request under way, or None; only its events reach ``reply``."""

    finished = Signal(object)  # Finished of the request under way (an older request's is dropped)
    notice = Signal(str)

    def __init__(self, bridge: EngineBridge, reply: Reply, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.bridge, self.reply = bridge, reply
        self.request: str | None = None
        self.answer_now_next = False  # Answer now pressed during the calls: the next request skips its thinking
        bridge.thinking_delta.connect(self._on_thinking)
        bridge.answer_delta.connect(self._on_answer)
        bridge.metrics_updated.connect(self._on_metrics)
        bridge.backend_chosen.connect(self._on_backend)
        bridge.loop_detected.connect(self._on_loop)
        bridge.finished.connect(self._on_finished)

    def new_request(self) -> str:
        """A new request is under way (the reply is busy from here); the last one's late events are dropped."""
        self.request = uuid.uuid4().hex[:12]
        return self.request

    async def run(self, messages: list[Message], sampling: SamplingConfig, resume: Resume | None,
                  tools: Tools | None, tool_choice: ToolChoice | None) -> None:
        """Send the request under way; whatever happens, it ends in one Finished."""
        request_id, bridge = self.request or self.new_request(), self.bridge
        try:
            await bridge.generate(messages, sampling, request_id, resume=resume, tools=list(tools or []) or None,
                                  tool_choice=tool_choice)
        except Exception as exc:  # the engine thread itself failed: still end the turn cleanly
            log.exception("generation crashed")
            bridge.drain()  # the deltas that did arrive reach the reply before it ends
            bridge.post(EngineErrorEvent(request_id, EngineFailure(
                FailureKind.ENGINE_DIED, f"The engine failed: {exc}", "Restart the engine.")))
            bridge.post(Finished(request_id, "error", self.reply.thinking, self.reply.answer))

    def _on_thinking(self, request_id: str, text: str) -> None:
        if request_id == self.request:
            if self.answer_now_next:
                self.answer_now_next = False
                self.bridge.answer_now(request_id)
            self.reply.add_thinking(text)

    def _on_answer(self, request_id: str, text: str) -> None:
        if request_id == self.request:
            self.reply.add_answer(text)

    def _on_metrics(self, metrics: Metrics) -> None:
        if metrics.request_id == self.request:
            self.reply.count_tokens(metrics.thinking_tokens)

    def _on_backend(self, event: BackendChosen) -> None:
        if event.request_id == self.request:
            self.reply.set_backend(event.backend)
            if event.reason:
                self.notice.emit(f"Answered by {event.backend}: {event.reason}.")

    def _on_loop(self, event: LoopDetected) -> None:
        if event.request_id == self.request:
            self.reply.note_loop(LoopNote(event.summary(), event.phase, event.outcome, event.start_char,
                                          event.kept_char, event.copies))

    def _on_finished(self, finished: Finished) -> None:
        if finished.request_id == self.request:
            self.request = None
            self.finished.emit(finished)


CANT_CONTINUE = ("This backend can't go on with a cut reply (a remote server is asked anew, not continued); "
                 "Continue needs the local engine. Regenerate asks again.")


def length_resume_point(turn: Turn) -> Resume | None:
    """Where a reply cut at max tokens goes on: after its answer, or in its thinking if it had no answer yet."""
    if turn.finish_reason != "length":
        return None
    return Resume("answer", turn.thinking, turn.answer) if turn.answer else Resume("thinking", turn.thinking)


class LoopRecord:
    """What the loop guard did in each reply this session saw finish (by message id)."""

    def __init__(self) -> None:
        self._loops: dict[int | None, tuple[LoopDetected, ...]] = {}
        self._continued_after = ""  # the cut reply's record, while Continue anyway streams

    def forget(self, turn: Turn) -> None:
        self._loops.pop(turn.message_id, None)

    def resume_point(self, turn: Turn) -> Resume | None:
        """Where the reply can go on, if the loop guard cut it."""
        cut = [loop for loop in self._loops.get(turn.message_id, ()) if loop.outcome != "warned"]
        if not cut:
            return None
        phase = cut[-1].phase
        return Resume(phase, turn.thinking, turn.answer if phase == "answer" else "")

    def continue_past(self, turn: Turn) -> None:
        self._continued_after = turn.loop_guard or "a loop"

    def record(self, turn: Turn, loops: tuple[LoopDetected, ...]) -> None:
        """The turn's loop record: what was cut stays on it, with what the user chose."""
        turn.loop_guard = "\n".join(loop.summary() for loop in loops)
        if self._continued_after:
            turn.loop_guard = "\n".join(filter(None, [self._continued_after, "continued anyway, guard off",
                                                       turn.loop_guard]))
            self._continued_after = ""
        self._loops[turn.message_id] = loops
