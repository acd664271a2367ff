"""What a generate() call carries besides the messages: the tools offered, the tool choice, and a reply to go
on with. Plain data with no engine behind it, so the pipe's messages and the reply code can use it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from app.core.chat.images import ImagePart, split_content, with_images
from app.engine.events import ToolCall

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


@dataclass(frozen=True)
class MessageSpec:
    """One chat message, typed for the engine pipe; OpenAI's shape (``Message``) at its two ends."""

    role: str
    content: str | None = ""
    name: str = ""
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant's calls
    tool_call_id: str = ""  # a tool message: the call it answers
    reasoning_content: str = ""  # an assistant's thinking, under the name chat templates read
    kept_thinking: str = ""  # an earlier answer's thinking that its switch keeps in the prompt (kept_thinking.py)
    reasoning: str = ""  # a tool round's thinking, under vLLM's name: Harmony keeps it between tool calls
    images: tuple[ImagePart, ...] = ()  # a user's images (OpenAI's image_url parts), as bytes and type

    @classmethod
    def from_openai(cls, message: dict[str, Any]) -> MessageSpec:
        calls = tuple(ToolCall(str(c.get("id", "")), str((c.get("function") or {}).get("name", "")),
                               _json_text((c.get("function") or {}).get("arguments")))
                      for c in message.get("tool_calls") or ())
        content = message.get("content")
        images: tuple[ImagePart, ...] = ()
        if isinstance(content, list):  # text and image parts (ImageRefused for a part no engine reads)
            content, images = split_content(content)
        return cls(str(message.get("role", "")), content, str(message.get("name") or ""), calls,
                   str(message.get("tool_call_id") or ""), str(message.get("reasoning_content") or ""),
                   kept_thinking=str(message.get("kept_thinking") or ""), reasoning=str(message.get("reasoning") or ""),
                   images=images)

    def as_openai(self) -> dict[str, Any]:
        content = with_images(self.content or "", self.images) if self.images else self.content
        message: dict[str, Any] = {"role": self.role, "content": content}
        if self.name:
            message["name"] = self.name
        if self.tool_calls:
            message["tool_calls"] = [call.as_openai() for call in self.tool_calls]
        if self.tool_call_id:
            message["tool_call_id"] = self.tool_call_id
        if self.reasoning_content:
            message["reasoning_content"] = self.reasoning_content
        if self.kept_thinking:
            message["kept_thinking"] = self.kept_thinking
        if self.reasoning:
            message["reasoning"] = self.reasoning
        return message


def _json_text(arguments: object) -> str:
    """A call's arguments as JSON text: OpenAI sends text, a chat template's history may hold the object."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments if arguments is not None else {})


@dataclass(frozen=True)
class ToolSpec:
    """One offered function tool, typed for the engine pipe; OpenAI's JSON only at the edges (as_openai).

    ``parameters`` is the JSON schema's text, so the message stays plain and comparable."""

    name: str
    description: str = ""
    parameters: str = "{}"

    @classmethod
    def from_openai(cls, tool: dict[str, Any]) -> ToolSpec:
        function = tool.get("function") or {}
        return cls(str(function.get("name", "")), str(function.get("description") or ""),
                   json.dumps(function.get("parameters") or {}, sort_keys=True))

    def as_openai(self) -> dict[str, Any]:
        function: dict[str, Any] = {"name": self.name, "parameters": json.loads(self.parameters)}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolChoiceSpec:
    """OpenAI's tool_choice, typed: "auto", "none", "required", or one named function."""

    mode: Literal["auto", "none", "required", "function"]
    name: str = ""  # the function, for mode "function"

    @classmethod
    def from_openai(cls, choice: ToolChoice) -> ToolChoiceSpec:
        if isinstance(choice, dict):
            return cls("function", str((choice.get("function") or {}).get("name", "")))
        return cls("none" if choice == "none" else "required" if choice == "required" else "auto")

    def as_openai(self) -> ToolChoice:
        return {"type": "function", "function": {"name": self.name}} if self.mode == "function" else self.mode
