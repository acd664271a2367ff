"""ToolCallingScriptedDouble: the scripted engine double, able to play a reply that calls tools. Not a model.

For deterministic UI tests of the tool loop (order of cards, approval, Stop/Regenerate/Answer now during a
call). It records what each request offered (``tool_requests``), so tests check what the engine was sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.settings.settings import SamplingConfig
from app.engine.base import Message
from app.engine.events import EngineEvent, Finished, ThinkingDelta, ToolCall
from app.engine.requests import Resume
from app.engine.scripted import Script, ScriptedEngineDouble


@dataclass
class CallScript:
    """A reply that thinks ``thinking`` and then calls tools: ``calls`` are (name, JSON arguments); ``ids``, the
    call ids a server chose (repeated or empty ones included), else ids of the double's own."""

    thinking: str
    calls: list[tuple[str, str]]
    ids: list[str] | None = None


class ToolCallingScriptedDouble(ScriptedEngineDouble):
    def __init__(self, scripts: Sequence[Script | CallScript] = (), **kwargs: Any) -> None:
        super().__init__((), **kwargs)
        self.scripts = list(scripts)  # type: ignore[arg-type]
        self.tool_requests: list[dict[str, Any]] = []

    async def generate(self, messages: Sequence[Message], sampling: SamplingConfig,  # type: ignore[override]
                       request_id: str | None = None, *, ignore_eos: bool = False, resume: Resume | None = None,
                       tools: list[dict[str, Any]] | None = None,
                       tool_choice: Any = None) -> AsyncGenerator[EngineEvent, None]:
        self.tool_requests.append({"messages": list(messages), "tools": tools, "tool_choice": tool_choice})
        script = self.scripts[0] if self.scripts else None
        if not isinstance(script, CallScript):
            async for event in super().generate(messages, sampling, request_id, ignore_eos=ignore_eos, resume=resume):
                yield event
            return
        self.scripts.pop(0)
        self.requests.append(list(messages))
        rid = request_id or "r"
        for word in script.thinking.split(" "):
            await asyncio.sleep(0.002)
            yield ThinkingDelta(rid, word + " ")
        ids = script.ids or [f"call-{len(self.tool_requests)}-{i}" for i in range(len(script.calls))]
        calls = tuple(ToolCall(call_id, name, args) for call_id, (name, args) in zip(ids, script.calls))
        yield Finished(rid, "tool_calls", script.thinking + " ", "", tool_calls=calls)
