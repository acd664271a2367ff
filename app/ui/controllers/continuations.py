"""Going on with a reply that was cut: past the loop guard's cut (Continue anyway), or past max tokens
(Continue). ChatSession's part that picks where a reply resumes; the reply itself runs as any other."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qasync import asyncSlot

from app.ui.controllers.reply_feed import CANT_CONTINUE, length_resume_point

if TYPE_CHECKING:
    from PySide6.QtCore import SignalInstance

    from app.core.chat.conversation import Conversation
    from app.core.settings.settings import SamplingConfig
    from app.engine.requests import Resume
    from app.ui.controllers.conversation_store import ConversationStore
    from app.ui.controllers.engine_controller import EngineController
    from app.ui.controllers.reply_feed import LoopRecord


class ReplyContinuations:
    """Mixed into ChatSession, whose attributes these are."""

    controller: EngineController
    store: ConversationStore
    notice: SignalInstance
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
        answer after an answer loop). An engine that can't resume (a remote server), or a reply with
        no cut, is answered again instead, with the guard off."""
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
