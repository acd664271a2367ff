"""Conversations as plain data: turns of user text, thinking and answer."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

# A chat message in OpenAI's shape: {"role", "content"}; an assistant's may also carry "tool_calls"
# ([{"id", "type": "function", "function": {"name", "arguments": JSON text}}], content then "" or None),
# and a {"role": "tool", "tool_call_id", "content"} message carries a call's result.
Message = dict[str, Any]


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


@dataclass
class Conversation:
    title: str = "New conversation"
    turns: list[Turn] = field(default_factory=list)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    thinking: bool = True  # the chat's Think switch

    def messages(self) -> list[Message]:
        """The chat so far for the model: earlier answers without their thinking, then the last user turn."""
        messages: list[Message] = []
        for turn in self.turns[:-1]:
            messages.append({"role": "user", "content": turn.user})
            if turn.answer:
                messages.append({"role": "assistant", "content": turn.answer})
        if self.turns:
            messages.append({"role": "user", "content": self.turns[-1].user})
        return messages

    def title_from_first_message(self) -> None:
        if self.turns and self.title == "New conversation":
            first = " ".join(self.turns[0].user.split())
            self.title = first[:40] + ("…" if len(first) > 40 else "")
