"""What a generate() call carries besides the messages: the tools offered, the tool choice, and a reply to go
on with. Plain data with no engine behind it, so the pipe's messages and the reply code can use it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

# OpenAI's tool_choice: "auto" (the model decides), "none", "required" (at least one call), or one named
# function {"type": "function", "function": {"name": ...}}. Tools are OpenAI function tools:
# {"type": "function", "function": {"name", "description", "parameters": JSON schema}}.
ToolChoice = str | dict[str, Any]
Tools = Sequence[dict[str, Any]]


@dataclass(frozen=True)
class Resume:
    """A reply the loop guard cut, to go on with ("Continue anyway"): the text kept so far.

    ``phase`` is where it goes on: "thinking" (the kept thinking; any answer is written anew) or
    "answer" (after the kept thinking and answer). The new reply's texts start with the kept ones.
    """

    phase: Literal["thinking", "answer"]
    thinking: str
    answer: str = ""
