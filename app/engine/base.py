"""What every engine offers the UI: the real EngineHost and the scripted double alike."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from app.core.conversation import Message
from app.core.settings import EngineConfig, SamplingConfig
from app.engine.events import EngineEvent, EngineReady, Finished, StatusChanged
from app.engine.loop_thread import EngineLoopThread

EventSink = Callable[[EngineEvent], None]


@dataclass(frozen=True)
class Resume:
    """A reply the loop guard cut, to go on with ("Continue anyway"): the text kept so far.

    ``phase`` is where it goes on: "thinking" (the kept thinking; any answer is written anew) or
    "answer" (after the kept thinking and answer). The new reply's texts start with the kept ones.
    """

    phase: Literal["thinking", "answer"]
    thinking: str
    answer: str = ""


class EngineBase:
    """Owns the engine loop thread. Subclasses implement start/generate/abort/shutdown."""

    backend_name = "local"  # recorded with each reply: "local" or a remote profile's name
    can_resume = False  # generate() can go on with a cut reply (``resume``); else it answers anew

    def __init__(self, on_status: EventSink | None = None) -> None:
        self.loop_thread = EngineLoopThread()
        self._on_status = on_status or (lambda event: None)
        self.ready: EngineReady | None = None

    def set_status_sink(self, sink: EventSink) -> None:
        self._on_status = sink

    def _status(self, state: Any, message: str, progress: float | None = None) -> None:
        self._on_status(StatusChanged(state, message, progress))

    async def start(self, config: EngineConfig) -> EngineReady:
        raise NotImplementedError

    def generate(self, messages: Sequence[Message], sampling: SamplingConfig, request_id: str | None = None, *,
                 ignore_eos: bool = False, resume: Resume | None = None) -> AsyncGenerator[EngineEvent, None]:
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
                        tools: list[dict[str, Any]] | None = None, tool_choice: Any = None) -> Finished | None:
        """Run ``generate`` on the engine loop, handing each event to a thread-safe sink.

        ``tools`` (OpenAI's shape) and ``tool_choice`` reach ``generate`` only when given."""
        last: Finished | None = None
        offered: dict[str, Any] = {"tools": tools, "tool_choice": tool_choice} if tools else {}
        replies = self.generate(messages, sampling, request_id, ignore_eos=ignore_eos, resume=resume, **offered)
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
