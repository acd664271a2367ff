"""Going on with a reply that was cut: past the loop guard's cut (Continue anyway), past max tokens
(Continue), or from the thinking the user paused and edited (Pause, Resume). ChatSession's part that picks
where a reply resumes; the reply itself runs as any other."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qasync import asyncSlot

from app.core.steering.thinking_pause import CANT_PAUSE_REMOTE, DROPPED, ThinkingPause
from app.engine.requests import Resume
from app.ui.controllers.reply_feed import CANT_CONTINUE, length_resume_point

if TYPE_CHECKING:
    from PySide6.QtCore import SignalInstance

    from app.core.chat.conversation import Conversation
    from app.core.chat.reply import Reply
    from app.core.settings.settings import SamplingConfig
    from app.engine.events import Finished
    from app.ui.controllers.conversation_store import ConversationStore
    from app.ui.controllers.engine_controller import EngineController
    from app.ui.controllers.reply_feed import LoopRecord, ReplyFeed


class ReplyContinuations:
    """Mixed into ChatSession, whose attributes these are."""

    controller: EngineController
    store: ConversationStore
    notice: SignalInstance
    state_changed: SignalInstance
    reply: Reply
    pause: ThinkingPause
    feed: ReplyFeed
    _loops: LoopRecord

    @property
    def conversation(self) -> Conversation:
        return self.store.conversation

    @property
    def streaming(self) -> bool:
        raise NotImplementedError

    async def _run_reply(self, conversation: Conversation, sampling: SamplingConfig | None = None,
                         resume: Resume | None = None) -> None:
        raise NotImplementedError

    @asyncSlot()
    async def continue_past_loop(self) -> None:
        """The repetition was wanted: go on with the reply the guard cut, with the guard off for it.

        The reply goes on from where it was cut (the kept thinking after a thinking loop, the kept
        answer after an answer loop). An engine that can't resume (a server without vLLM's completions),
        or a reply with no cut, is answered again instead, with the guard off."""
        conversation = self.conversation
        if self.streaming or not conversation.turns or not self.controller.engine_ready:
            return
        turn = conversation.turns[-1]
        resume = self._loops.resume_point(turn) if self.controller.bridge.engine.can_resume else None
        self._loops.continue_past(turn)
        if resume is None:
            conversation.branch_at(len(conversation.turns) - 1)
        await self._run_reply(conversation, self.controller.settings.sampling.with_loop_guard(enabled=False), resume)

    @asyncSlot()
    async def continue_answer(self) -> None:
        """A reply cut at max tokens goes on from where it stopped, into the same turn: the engine reads the
        prompt, the kept thinking and answer (the prefix cache keeps that cheap) and writes on."""
        conversation = self.conversation
        if self.streaming or not conversation.turns or not self.controller.engine_ready:
            return
        if (resume := length_resume_point(conversation.turns[-1])) is None:
            return
        if not self.controller.bridge.engine.can_resume:
            self.notice.emit(CANT_CONTINUE)
            return
        await self._run_reply(conversation, resume=resume)

    @property
    def can_continue(self) -> bool:
        """The shown reply ended at max tokens, so Continue applies."""
        turn = self.store.last_turn
        return turn is not None and length_resume_point(turn) is not None

    # ---- pause, edit, resume ----------------------------------------------------------------

    @property
    def can_pause(self) -> bool:
        """The reply streams its thinking (this chat thinks) on an engine that can go on from an edited one."""
        can_resume = self.controller.bridge.engine.can_resume
        return self.conversation.thinking and ThinkingPause.applies(self.reply, can_resume)

    @property
    def pause_reason(self) -> str:
        """Why Pause is off for this backend, or "" where it can apply."""
        engine = self.controller.bridge.engine
        return "" if engine.can_resume else engine.resume_refusal or CANT_PAUSE_REMOTE

    @asyncSlot()
    async def pause_thinking(self) -> None:
        """Stop the request while it thinks; when it has ended, the thinking pane becomes editable."""
        if self.can_pause and self.pause.state == "off" and (request := self.feed.request):
            self.pause.begin()
            self.state_changed.emit()
            await self.controller.bridge.abort(request)

    @asyncSlot()
    async def resume_thinking(self, edited: str) -> None:
        """Go on from ``edited``: the engine reads the prompt, the opened think block and the edited thinking
        (the prefix cache holds what it had read), and writes on into the same turn, which keeps both versions."""
        conversation = self.conversation
        if not self.pause.paused or self.streaming or not conversation.turns or not self.controller.engine_ready:
            return
        turn = conversation.turns[-1]
        if (edit := self.pause.take_edit(edited)) is not None:
            turn.thinking_edits.append(edit)
        self.pause.resumed = True
        await self._run_reply(conversation, resume=Resume("thinking", edited))

    def end_pause(self) -> None:
        """Stop (Esc) while paused, or another chat or branch: the edit is dropped, the turn stays as it was."""
        paused = self.pause.paused
        if self.pause.end():
            if paused:
                self.reply.load(self.store.last_turn)
                self.notice.emit(DROPPED)
            self.state_changed.emit()

    def note_prefix_cache(self, finished: Finished) -> None:
        """After a resume from an edit: how much of what the engine read came from vLLM's prefix cache."""
        if self.pause.resumed and finished.reason not in ("abort", "error") and (m := finished.metrics) is not None:
            if m.sent_prompt_tokens:
                self.notice.emit(f"Resumed from your edit: vLLM's prefix cache held {m.cached_prompt_tokens} of the "
                                 f"{m.sent_prompt_tokens} tokens it read "
                                 f"({100 * m.cached_prompt_tokens / m.sent_prompt_tokens:.0f} %).")
        self.pause.resumed = False
