"""Split a streamed completion into its thinking trace and its answer.

Two implementations with one interface (``feed`` → ``Split``):

* ``ThinkTagSplitter``: our own streaming splitter for ``<think>…</think>``. It
  copes with tags cut across deltas, a prompt that opened (or closed) the think
  block, a model that opens ``<think>`` itself, and a think block that never closes.
* ``VllmReasoningSplitter``: wraps one of vLLM's reasoning parsers (deepseek_r1,
  qwen3, …) for model families vLLM knows.

``RemoteReplySplitter`` serves a remote server's deltas, which may already carry
the reasoning in a field of its own. Where a reply starts is a ``ThinkStart``:
read from the prompt's tail when we render it, from the model's family otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from app.core.models.model_families import model_family
from app.engine.events import AnswerDelta, EngineEvent, LoopDetected, ThinkingDelta
from app.engine.reply.harmony import NEXT_MESSAGE, REASONING_PARSER, call_markup, harmony_parser, harmony_request

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

# Where a reply starts. open: inside a think block (the prompt opened it, or a thinking model will);
# closed: after one (the prompt closed it: thinking off); none: a plain reply, unless it begins with <think>.
ThinkStart = Literal["open", "closed", "none"]


def think_start_of_prompt(prompt_tail: str) -> ThinkStart | None:
    """What a rendered prompt's last characters say about the reply; None when they say nothing."""
    tail = prompt_tail.rstrip()
    if tail.endswith(THINK_OPEN):
        return "open"
    if tail.endswith(THINK_CLOSE):
        return "closed"
    return None


def think_start_for_model(model_name: str, model_type: str | None, thinking_on: bool) -> ThinkStart:
    """Where a reply starts when the prompt can't be seen (a remote server renders it): thinking
    models with thinking on start inside the block, whether or not their template wrote ``<think>``."""
    return "open" if thinking_on and model_family(model_name, model_type).thinking != "plain" else "none"


@dataclass(frozen=True)
class Split:
    thinking: str = ""
    answer: str = ""


@dataclass
class ReplyTexts:
    """A reply's two texts as they stream out: the one place they are kept while the reply runs.

    The engine's ReplyStream writes them (``take``, ``cut``, ``start_from``); the window reads them through
    ``EngineBase.reply_so_far``, and ``Finished`` carries them at the end. Across the engine process's pipe,
    the window side keeps its image of them by ``follow``-ing the events (the child's copy dies with it).

    Each pane's leading whitespace is dropped (the newline after ``<think>``, the blank lines an answer
    opens with), and so is the thinking's trailing whitespace (the newline before ``</think>``): it is held
    back until more thinking follows it. Lists change in place, so a reader's reference stays current.
    """

    thinking: list[str] = field(default_factory=list)
    answer: list[str] = field(default_factory=list)
    _thinking_space: str = ""

    def take(self, request_id: str, part: Split) -> list[EngineEvent]:
        """Record a split delta; return the events that carry it to the UI."""
        events: list[EngineEvent] = []
        thinking = part.thinking if self.thinking else part.thinking.lstrip()
        if thinking:
            body = thinking.rstrip()
            if body:
                body = self._thinking_space + body
                self.thinking.append(body)
                events.append(ThinkingDelta(request_id, body))
                self._thinking_space = ""
            self._thinking_space += thinking[len(thinking.rstrip()):]
        answer = part.answer if self.answer else part.answer.lstrip()
        if answer:
            self.answer.append(answer)
            events.append(AnswerDelta(request_id, answer))
        return events

    def start_from(self, thinking: str, answer: str = "") -> None:
        """A reply that goes on after a cut one's kept text ("Continue anyway"): its texts start with it."""
        self.thinking[:] = [thinking] if thinking else []
        self.answer[:] = [answer] if answer else []

    def cut(self, phase: Literal["thinking", "answer"], chars: int) -> None:
        """Keep a phase's text up to ``chars`` (the loop guard cut it there)."""
        texts = self.thinking if phase == "thinking" else self.answer
        kept = "".join(texts)[:chars]
        texts[:] = [kept] if kept else []

    def follow(self, event: EngineEvent) -> None:
        """Keep up with the texts another ReplyTexts writes, from the events it returned: a delta as it was
        taken, a loop guard's cut where the writer cut."""
        if isinstance(event, ThinkingDelta):
            self.thinking.append(event.text)
        elif isinstance(event, AnswerDelta):
            self.answer.append(event.text)
        elif isinstance(event, LoopDetected) and event.outcome != "warned":
            self.cut(event.phase, event.kept_char)

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

    Only a ``<think>`` at the very start of a reply (after whitespace) opens the block: an answer
    that mentions the tag stays whole. Inside a block the prompt opened, a ``<think>`` the model
    writes again at its start is dropped. After ``</think>`` everything is answer. Characters that
    might be a tag are held back until the next delta decides, so the split never depends on where
    the stream was cut.
    """

    def __init__(self, *, start: ThinkStart | None = None, prompt_opened_think: bool = False) -> None:
        start = start or ("open" if prompt_opened_think else "none")
        self._state = {"open": "thinking", "closed": "after", "none": "before"}[start]
        self._at_block_start = True  # no thinking text yet: a <think> here is the model's own opening tag
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
            if self._state in ("before", "thinking") and self._at_block_start:
                # Only whitespace so far: is the next thing the opening tag?
                body = text.lstrip()
                if THINK_OPEN.startswith(body) and len(body) < len(THINK_OPEN):
                    self._held = text  # whitespace, perhaps a tag's first characters: the next delta decides
                    break
                self._at_block_start = False
                if body.startswith(THINK_OPEN):
                    text = body[len(THINK_OPEN):]
                    self._state = "thinking"
                    continue
                if self._state == "before":
                    self._state = "after"  # a plain reply: no tag is looked for from here on
            if self._state == "after":
                if self._trim_answer_start:  # the answer conventionally follows blank lines
                    text = text.lstrip("\n")
                    if not text:
                        break
                    self._trim_answer_start = False
                answer.append(text)
                break
            index = text.find(THINK_CLOSE)
            if index < 0:
                held = _partial_suffix(text, THINK_CLOSE)
                thinking.append(text[: len(text) - held])
                self._held = text[len(text) - held:]
                break
            thinking.append(text[:index])
            text = text[index + len(THINK_CLOSE):]
            self._state, self._trim_answer_start = "after", True
        return Split("".join(thinking), "".join(answer))

    def flush(self) -> Split:
        """End of stream: held-back characters were not a tag after all."""
        held, self._held = self._held, ""
        if not held:
            return Split()
        return Split(held, "") if self._state == "thinking" else Split("", held)


class VllmReasoningSplitter:
    """Adapter over a vLLM ``ReasoningParser``; tracks the cumulative state it needs.

    Once the think block has closed, the rest is answer and bypasses the parser: vLLM's parsers
    drop a ``</think>`` token that arrives alone, so an answer that mentions the tag would lose it
    on some cuts and not others. A ``<think>`` the model writes itself is dropped from the
    reasoning too: vLLM keeps it when it shares a delta with the next tokens.
    """

    def __init__(self, parser: Any) -> None:
        self._parser = parser
        self._text = ""
        self._token_ids: list[int] = []
        self._in_thinking = True
        self._reasoning_started = False

    @property
    def in_thinking(self) -> bool:
        return self._in_thinking

    def _split(self, message: Any) -> Split:
        if message is None:
            return Split()
        # The field was renamed from reasoning_content to reasoning.
        thinking = getattr(message, "reasoning", None) or getattr(message, "reasoning_content", None) or ""
        if not self._reasoning_started:
            thinking = thinking.lstrip()
            thinking = thinking[len(THINK_OPEN):] if thinking.startswith(THINK_OPEN) else thinking
            self._reasoning_started = bool(thinking.strip())
        return Split(thinking, message.content or "")

    def feed(self, delta_text: str, delta_token_ids: Sequence[int] = ()) -> Split:
        if not self._in_thinking:
            return Split("", delta_text)
        previous_text, previous_ids = self._text, list(self._token_ids)
        self._text += delta_text
        self._token_ids.extend(delta_token_ids)
        part = self._split(self._parser.extract_reasoning_streaming(
            previous_text, self._text, delta_text, previous_ids, list(self._token_ids), list(delta_token_ids)))
        if part.answer or THINK_CLOSE in self._text:
            self._in_thinking = False
            rest = self.flush()  # what the parser still holds belongs before the bypassed answer
            part = Split(part.thinking + rest.thinking, part.answer + rest.answer)
        return part

    def flush(self) -> Split:
        """Parsers built on vLLM's parser engine hold text back until the stream ends."""
        finish = getattr(self._parser, "finish_streaming", None)
        return self._split(finish()) if finish is not None else Split()


class HarmonySplitter:
    """gpt-oss: thinking and answer from vLLM's HarmonyParser on the token ids (analysis → thinking; final and
    commentary to no one → answer); calls go to the answer as their Harmony markup at the end, for the tool
    gate (harmony.py says why)."""

    def __init__(self, tokenizer: Any, kept_ids: Sequence[int] = ()) -> None:
        """``kept_ids``: a resumed reply's kept tokens (their channel with them), whose text the reply already
        has; the parser reads them first, so the model's next tokens are read in that channel."""
        self._parser = harmony_parser(tokenizer)
        self._request = harmony_request()
        self._in_thinking = True  # gpt-oss opens with its analysis channel
        self._calls: dict[int, list[str]] = {}  # index → [name, arguments]
        if kept_ids:
            self._split(self._parser.parse_delta("", list(kept_ids), self._request, finished=False))

    @property
    def in_thinking(self) -> bool:
        return self._in_thinking

    def feed(self, delta_text: str, delta_token_ids: Sequence[int] = ()) -> Split:
        if not delta_token_ids:
            return Split()
        return self._split(self._parser.parse_delta(delta_text, list(delta_token_ids), self._request,
                                                    finished=False))

    def flush(self) -> Split:
        """End of reply: what the parser held, then the calls as their markup (for the tool gate)."""
        part = self._split(self._parser.parse_delta("", [], self._request, finished=True))
        calls = NEXT_MESSAGE.join(call_markup(name, args) for name, args in self._calls.values())
        self._calls.clear()
        return Split(part.thinking, part.answer + calls)

    def _split(self, delta: Any) -> Split:
        if delta is None:
            return Split()
        for call in delta.tool_calls or ():
            name, args = self._calls.setdefault(call.index, ["", ""])
            function = call.function
            self._calls[call.index] = [name + (function.name or "" if function else ""),
                                       args + (function.arguments or "" if function else "")]
        thinking, answer = delta.reasoning or "", delta.content or ""
        if answer or delta.tool_calls:
            self._in_thinking = False
        elif thinking:
            self._in_thinking = True
        return Split(thinking, answer)


class RemoteReplySplitter:
    """A remote server's deltas. Once it sends reasoning in a field of its own (``reasoning_content``
    or ``reasoning``) it has split the reply itself, and its content is all answer; until then the
    content may carry raw ``<think>`` tags and goes through our splitter."""

    def __init__(self, start: ThinkStart) -> None:
        self._tags = ThinkTagSplitter(start=start)
        self._server_splits = False

    def feed(self, content: str, reasoning: str) -> Split:
        if reasoning and not self._server_splits:
            self._server_splits = True
            held = self._tags.flush()
            return Split(held.thinking + reasoning, held.answer + content)
        if self._server_splits:
            return Split(reasoning, content)
        return self._tags.feed(content)

    def flush(self) -> Split:
        return self._tags.flush()


def reasoning_parser_name(model_name: str, model_type: str | None) -> str | None:
    """Which vLLM reasoning parser fits this model, or None for models that don't think natively."""
    return model_family(model_name, model_type).parser


def make_splitter(parser_name: str | None, tokenizer: Any, *, start: ThinkStart,
                  kept_ids: Sequence[int] = ()) -> ReasoningSplitter:
    """vLLM's parser for a reply that starts thinking, when the family has one and it accepts the
    tokenizer; else our splitter. vLLM's parsers take a reply without tags for reasoning, so a reply
    whose prompt closed the block (thinking off), or a plain one, never goes to them. ``kept_ids``: a
    resumed reply's kept tokens, which Harmony's parser reads first (a tag splitter starts inside the block)."""
    if parser_name == REASONING_PARSER:  # Harmony: channels, not tags, and always vLLM's parser on the ids
        return HarmonySplitter(tokenizer, kept_ids)
    if parser_name and start == "open":
        try:
            from vllm.reasoning import ReasoningParserManager

            parser = ReasoningParserManager.get_reasoning_parser(parser_name)(
                tokenizer, chat_template_kwargs={"enable_thinking": True})
            return VllmReasoningSplitter(parser)
        except (KeyError, ValueError, RuntimeError):
            pass  # the tokenizer lacks the think tokens: fall back to text matching
    return ThinkTagSplitter(start=start)
