"""What every engine offers the window: EngineProcess (the child that runs vLLM), the remote and failover
backends, and the scripted double all derive from EngineBase."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from typing import Any

from app.core.chat.conversation import Message
from app.core.loop_thread import LoopThread
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.events import EngineEvent, EngineReady, Finished, StatusChanged
from app.engine.reply.reasoning import ReplyTexts
from app.engine.requests import Resume, ToolChoice, Tools

EventSink = Callable[[EngineEvent], None]
log = logging.getLogger(__name__)
SHUTDOWN_GRACE_S = 4.0  # at close, how long an engine may take to stop by itself before its processes are killed


class EngineBase:
    """Owns the engine loop thread. Subclasses implement start/generate/abort/shutdown."""

    backend_name = "local"  # recorded with each reply: "local" or a remote profile's name
    can_resume = False  # generate() can go on with a cut reply (``resume``); else it answers anew
    resume_refusal = ""  # where it can't: why, if the engine knows better than the generic reason

    def __init__(self, on_status: EventSink | None = None) -> None:
        self.loop_thread = LoopThread()
        self._on_status = on_status or (lambda event: None)
        self.ready: EngineReady | None = None
        self._logged_step: tuple[str, str] | None = None
        self._replies: dict[str, ReplyTexts] = {}  # request id: the texts of a reply this engine still writes

    def reply_so_far(self, request_id: str) -> ReplyTexts | None:
        """Thread-safe read: the texts of a reply still under way, where they are kept (its ReplyStream's, or
        for the engine process the window's image of them). None before it starts and once it has ended:
        its Finished carries them then. Partial saves read this, so there is no other copy to go stale."""
        return self._replies.get(request_id)

    @contextlib.contextmanager
    def keeping(self, request_id: str, texts: ReplyTexts) -> Iterator[ReplyTexts]:
        """``reply_so_far(request_id)`` reads ``texts`` while the block runs (a generate() up to its end)."""
        self._replies[request_id] = texts
        try:
            yield texts
        finally:
            if self._replies.get(request_id) is texts:
                self._replies.pop(request_id)

    def set_status_sink(self, sink: EventSink) -> None:
        self._on_status = sink

    def _status(self, state: Any, message: str, progress: float | None = None) -> None:
        # The log says how far a start got (tests wait on it too): once a step, not at each elapsed-time
        # tick, and not as "engine ready:", which is the window's own line once the engine is ready.
        step = (str(state), message.split("…")[0])
        if step != self._logged_step:
            self._logged_step = step
            log.info("engine status %s: %s", state, message)
        self._on_status(StatusChanged(state, message, progress))

    async def start(self, config: EngineConfig, *, kv_block_size: int | None = None) -> EngineReady:
        """``kv_block_size`` is for benchmarks (a small pool to fill); engines that can't choose ignore it."""
        raise NotImplementedError

    def generate(self, messages: Sequence[Message], sampling: SamplingConfig, request_id: str | None = None, *,
                 ignore_eos: bool = False, resume: Resume | None = None, tools: Tools | None = None,
                 tool_choice: ToolChoice | None = None) -> AsyncGenerator[EngineEvent, None]:
        """One reply's events, ending in exactly one Finished. With ``tools``, the model may answer with
        calls: ToolCallDelta events, then Finished(reason="tool_calls", tool_calls=...); ``tool_choice``
        "required" or a named function forces one (None means "auto" when tools are given)."""
        raise NotImplementedError

    async def abort(self, request_id: str) -> None:
        raise NotImplementedError

    def request_answer_now(self, request_id: str) -> None:
        raise NotImplementedError

    async def shutdown(self) -> None:
        raise NotImplementedError

    def engine_died(self) -> bool:
        """True when a started engine has stopped by itself. Polled by the UI."""
        return False

    async def stream_to(self, sink: EventSink, messages: Sequence[Message], sampling: SamplingConfig,
                        request_id: str, *, ignore_eos: bool = False, resume: Resume | None = None,
                        tools: Tools | None = None, tool_choice: ToolChoice | None = None) -> Finished | None:
        """Run ``generate`` on the engine loop, handing each event to a thread-safe sink."""
        last: Finished | None = None
        replies = self.generate(messages, sampling, request_id, ignore_eos=ignore_eos, resume=resume,
                                tools=tools, tool_choice=tool_choice)
        async with contextlib.aclosing(replies) as events:
            async for event in events:
                sink(event)
                if isinstance(event, Finished):
                    last = event
        return last

    def close(self, timeout: float = 30.0) -> None:
        """From any other thread: shut the engine down and end the loop thread."""
        if self.loop_thread.alive:
            with contextlib.suppress(Exception):
                self.loop_thread.submit(self.shutdown()).result(timeout)
            self.loop_thread.stop()
