"""Conversations as plain data: turns of user text, thinking, tool calls and answer."""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

# A chat message in OpenAI's shape: {"role", "content"}; an assistant's may also carry "tool_calls"
# ([{"id", "type": "function", "function": {"name", "arguments": JSON text}}], content then "" or None),
# and a {"role": "tool", "tool_call_id", "content"} message carries a call's result.
Message = dict[str, Any]
NOT_RUN = "The call did not run: the reply was stopped before it was approved."


@dataclass
class ToolStep:
    """One tool call in a reply and what became of it: pending (waiting for approval), running, ok, error,
    timeout, denied or stopped."""

    call_id: str
    name: str
    arguments: str  # JSON text, as the model wrote it
    server: str = ""
    result: str = ""
    status: str = "pending"

    @property
    def done(self) -> bool:
        return self.status not in ("pending", "running")


@dataclass
class ToolRound:
    """A step of a reply that called tools: what it thought (and wrote) before the calls, and the calls."""

    thinking: str
    calls: list[ToolStep]
    content: str = ""  # answer text written before the calls (usually none)

    def messages(self) -> list[Message]:
        """The assistant's calls and one tool message per call, as the model reads them back. The thinking that
        led to the calls goes with them as ``reasoning`` (vLLM's field): Harmony keeps it between tool calls
        and drops it once the turn has its final answer; local chat templates don't get it (template_messages)."""
        calls = [{"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                 for c in self.calls]
        thought = {"reasoning": self.thinking.strip()} if self.thinking.strip() else {}
        return [{"role": "assistant", "content": self.content, "tool_calls": calls, **thought},
                *({"role": "tool", "tool_call_id": c.call_id, "content": c.result if c.done else NOT_RUN}
                  for c in self.calls)]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolRound:
        return cls(data.get("thinking", ""), [ToolStep(**call) for call in data.get("calls", [])],
                   data.get("content", ""))


@dataclass
class Turn:
    user: str
    thinking: str = ""
    answer: str = ""
    finish_reason: str | None = None  # None while the reply streams
    thinking_tokens: int = 0
    answer_tokens: int = 0
    ttft_s: float | None = None
    answer_tok_s: float = 0.0
    message_id: int | None = None  # its row in the history database
    model: str = ""
    kv_cache_dtype: str = ""
    backend: str = ""  # which backend answered: "local" or a remote profile's name
    loop_guard: str = ""  # what the loop guard found and did, one line per loop (LoopDetected.summary)
    tool_rounds: list[ToolRound] = field(default_factory=list)  # the calls before ``thinking`` and ``answer``


@dataclass
class Conversation:
    title: str = "New conversation"
    turns: list[Turn] = field(default_factory=list)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    thinking: bool = True  # the chat's Think switch
    tools: bool = False  # the chat's Tools switch

    def messages(self) -> list[Message]:
        """The chat so far for the model: earlier answers without their thinking, then the last user turn
        with the tool calls its reply made so far and their results."""
        messages: list[Message] = []
        for turn in self.turns[:-1]:
            messages.append({"role": "user", "content": turn.user})
            for tool_round in turn.tool_rounds:
                messages += tool_round.messages()
            if turn.answer:
                messages.append({"role": "assistant", "content": turn.answer})
        if self.turns:
            messages.append({"role": "user", "content": self.turns[-1].user})
            for tool_round in self.turns[-1].tool_rounds:
                messages += tool_round.messages()
        return messages

    def title_from_first_message(self) -> None:
        if self.turns and self.title == "New conversation":
            first = " ".join(self.turns[0].user.split())
            self.title = first[:40] + ("…" if len(first) > 40 else "")
