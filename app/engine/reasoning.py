"""Split a streamed completion into its thinking trace and its answer.

Two implementations with one interface (``feed`` → ``Split``):

* ``ThinkTagSplitter``: our own streaming splitter for ``<think>…</think>``. It
  copes with tags cut across deltas, a prompt that already opened ``<think>``,
  text before ``<think>`` and a think block that never closes.
* ``VllmReasoningSplitter``: wraps one of vLLM's reasoning parsers (deepseek_r1,
  qwen3, …) for model families vLLM knows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.engine.events import AnswerDelta, EngineEvent, ThinkingDelta

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


@dataclass(frozen=True)
class Split:
    thinking: str = ""
    answer: str = ""


@dataclass
class ReplyTexts:
    """A reply's two texts as they stream out. Each pane's leading whitespace is dropped: it is
    the newline after ``<think>`` or the blank lines an answer phase opens with."""

    thinking: list[str] = field(default_factory=list)
    answer: list[str] = field(default_factory=list)

    def take(self, request_id: str, part: Split) -> list[EngineEvent]:
        """Record a split delta; return the events that carry it to the UI."""
        events: list[EngineEvent] = []
        thinking = part.thinking if self.thinking else part.thinking.lstrip()
        if thinking:
            self.thinking.append(thinking)
            events.append(ThinkingDelta(request_id, thinking))
        answer = part.answer if self.answer else part.answer.lstrip()
        if answer:
            self.answer.append(answer)
            events.append(AnswerDelta(request_id, answer))
        return events

    @property
    def thinking_text(self) -> str:
        return "".join(self.thinking)

    @property
    def answer_text(self) -> str:
        return "".join(self.answer)


class ReasoningSplitter(Protocol):
    @property
    def in_thinking(self) -> bool: ...

    def feed(self, delta_text: str, delta_token_ids: Sequence[int] = ()) -> Split: ...

    def flush(self) -> Split: ...


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


class ThinkTagSplitter:
    """Streaming ``<think>`` splitter.

    Text before ``<think>`` belongs to the answer (some models greet first).
    Characters that might be the start of a tag are held back until the next
    delta decides, so the split never depends on where the stream was cut.
    """

    def __init__(self, *, prompt_opened_think: bool = False) -> None:
        self._state = "thinking" if prompt_opened_think else "before"
        self._held = ""
        self._trim_answer_start = False

    @property
    def in_thinking(self) -> bool:
        return self._state == "thinking"

    def feed(self, delta_text: str, delta_token_ids: Sequence[int] = ()) -> Split:
        text = self._held + delta_text
        self._held = ""
        thinking: list[str] = []
        answer: list[str] = []
        while text:
            if self._state == "after":
                if self._trim_answer_start:  # the answer conventionally follows blank lines
                    text = text.lstrip("\n")
                    if not text:
                        break
                    self._trim_answer_start = False
                answer.append(text)
                break
            tag = THINK_CLOSE if self._state == "thinking" else THINK_OPEN
            out = thinking if self._state == "thinking" else answer
            index = text.find(tag)
            if index < 0:
                held = _partial_suffix(text, tag)
                out.append(text[: len(text) - held])
                self._held = text[len(text) - held:]
                break
            out.append(text[:index])
            text = text[index + len(tag):]
            if self._state == "thinking":
                self._state, self._trim_answer_start = "after", True
            else:
                self._state = "thinking"
        return Split("".join(thinking), "".join(answer))

    def flush(self) -> Split:
        """End of stream: held-back characters were not a tag after all."""
        held, self._held = self._held, ""
        if not held:
            return Split()
        return Split(held, "") if self._state == "thinking" else Split("", held)


class VllmReasoningSplitter:
    """Adapter over a vLLM ``ReasoningParser``; tracks the cumulative state it needs."""

    def __init__(self, parser: Any, *, prompt_opened_think: bool = True) -> None:
        self._parser = parser
        self._text = ""
        self._token_ids: list[int] = []
        self._in_thinking = True
        self._prompt_opened = prompt_opened_think

    @property
    def in_thinking(self) -> bool:
        return self._in_thinking

    def feed(self, delta_text: str, delta_token_ids: Sequence[int] = ()) -> Split:
        previous_text, previous_ids = self._text, list(self._token_ids)
        self._text += delta_text
        self._token_ids.extend(delta_token_ids)
        message = self._parser.extract_reasoning_streaming(
            previous_text, self._text, delta_text, previous_ids, list(self._token_ids), list(delta_token_ids))
        if message is None:
            return Split()
        # The field was renamed from reasoning_content to reasoning.
        thinking = getattr(message, "reasoning", None) or getattr(message, "reasoning_content", None) or ""
        answer = message.content or ""
        if answer or THINK_CLOSE in self._text:
            self._in_thinking = False
        return Split(thinking, answer)

    def flush(self) -> Split:
        return Split()


# vLLM parser names by model family; matched against config.json's model_type and the model name.
_PARSER_BY_FAMILY = (
    ("deepseek-r1", "deepseek_r1"),
    ("r1-distill", "deepseek_r1"),
    ("qwq", "deepseek_r1"),
    ("qwen3", "qwen3"),
)


def reasoning_parser_name(model_name: str, model_type: str | None) -> str | None:
    """Which vLLM reasoning parser fits this model, or None for plain chat models."""
    haystack = f"{model_name} {model_type or ''}".lower()
    for needle, parser in _PARSER_BY_FAMILY:
        if needle in haystack:
            return parser
    return None


def make_splitter(parser_name: str | None, tokenizer: Any, *, prompt_opened_think: bool) -> ReasoningSplitter:
    """vLLM's parser when the family has one and it accepts the tokenizer, else our splitter."""
    if parser_name:
        try:
            from vllm.reasoning import ReasoningParserManager

            parser = ReasoningParserManager.get_reasoning_parser(parser_name)(tokenizer)
            return VllmReasoningSplitter(parser, prompt_opened_think=prompt_opened_think)
        except (KeyError, ValueError, RuntimeError):
            pass  # the tokenizer lacks the think tokens: fall back to text matching
    return ThinkTagSplitter(prompt_opened_think=prompt_opened_think)
