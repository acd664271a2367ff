"""Tool calls in a local reply: vLLM's own tool parsers, chosen per family, over the reply's events.

``ToolCallGate`` sits between a reply's events and its consumer. Text streams on until the first
sign of a call (a parser's start marker, in the answer or in the thinking); from there it is held
back. When the reply ends, the held answer goes to the family's vLLM tool parser
(``extract_tool_calls``, the path vLLM's own server takes for a finished reply). Calls come out as
ToolCallDelta events and Finished(reason="tool_calls", tool_calls=...); held text that holds no call
is released as the parser's content (as it was, less a framing such as Kimi-K3's), so nothing is
lost. A call the model wrote inside its thinking (canitoolcall's ``x-call-inside-think``) is taken
as a call when the answer has none, and cut out of the thinking.

Forced calls (tool_choice "required" or a named function) are generated under structured outputs,
with the schema vLLM's server builds (``get_json_schema_from_tools``): the answer is then JSON
(the named function's arguments, or a list of ``{"name", "parameters"}``), turned into calls here.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.engine.events import AnswerDelta, EngineEvent, Finished, ThinkingDelta, ToolCall, ToolCallDelta
from app.engine.reply.harmony import TOOL_PARSER as HARMONY_TOOL_PARSER
from app.engine.reply.harmony import harmony_parse

log = logging.getLogger(__name__)

# Where a call starts and ends, per vLLM tool parser: text from a start marker on is held back.
CALL_MARKERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "hermes": (("<tool_call>",), ("</tool_call>",)),
    "qwen3_coder": (("<tool_call>", "<function="), ("</tool_call>", "</function>")),
    "qwen3_xml": (("<tool_call>", "<function="), ("</tool_call>", "</function>")),
    "glm45": (("<tool_call>",), ("</tool_call>",)),
    "glm47": (("<tool_call>",), ("</tool_call>",)),
    "deepseek_v3": (("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"), ("<｜tool▁calls▁end｜>",)),
    "deepseek_v31": (("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"), ("<｜tool▁calls▁end｜>",)),
    # DSML (V3.2 function_calls, V4 tool_calls, V4.1 " calls"): every block opens with <｜DSML｜
    **{name: (("<｜DSML｜",), ("</｜DSML｜function_calls>", "</｜DSML｜tool_calls>", "</｜DSML｜ calls>"))
       for name in ("deepseek_v32", "deepseek_v4", "deepseek_v41")},
    "kimi_k2": (("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>", "<|tool_call_begin|>"),
                ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")),
    "kimi_k3": (("<|open|>tools<|sep|>",), ("<|close|>tools<|sep|>",)),
    "gemma4": (("<|tool_call>",), ("<tool_call|>",)),
    "openai": (("<|channel|>commentary to=functions.",), ("<|call|>",)),  # harmony.call_markup
    "llama3_json": (("<|python_tag|>", "{"), ("}",)),
    "llama4_pythonic": (("<|python_start|>", "["), ("<|python_end|>", "]")),
}
# Parsers whose format frames the whole answer (Kimi-K3's <|open|>response<|sep|>…<|close|>response<|sep|>,
# opened by the model or by the prompt): the answer is held for the parser, whose content drops the frame.
FRAMED_ANSWER = frozenset({"kimi_k3"})
DEFAULT_PARSER = "hermes"  # the widest-spread format; the embedded SmolLM2 has none of its own

Parse = Callable[[str], tuple[str, list[ToolCall]]]  # text → (text before the calls, calls); no calls: (text, [])


@dataclass(frozen=True)
class ToolOffer:
    """The tools a request offers and how it may use them (OpenAI's shapes)."""

    tools: tuple[dict[str, Any], ...]
    choice: str | dict[str, Any] = "auto"

    @property
    def active(self) -> bool:
        return bool(self.tools) and self.choice != "none"

    @property
    def forced_name(self) -> str | None:
        """The function a named tool_choice forces, if any."""
        if isinstance(self.choice, dict):
            name = (self.choice.get("function") or {}).get("name")
            return str(name) if name else None
        return None

    @property
    def forced(self) -> bool:
        return self.active and (self.choice == "required" or self.forced_name is not None)


def offer_of(tools: Sequence[dict[str, Any]] | None, choice: str | dict[str, Any] | None) -> ToolOffer | None:
    """The offer, or None when no tools are offered or the choice is "none" (the model answers in text)."""
    offer = ToolOffer(tuple(tools or ()), choice if choice is not None else "auto")
    return offer if offer.active else None


def template_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as chat templates take them: content never None, and a call's arguments as an object
    (templates iterate them), as vLLM's server hands them over; a tool round's ``reasoning`` is left out (it is
    for Harmony, which renders its own prompt)."""
    out = []
    for message in without_reasoning(messages):
        message["content"] = message.get("content") or ""
        if message.get("tool_calls"):
            message["tool_calls"] = [_with_object_arguments(call) for call in message["tool_calls"]]
        out.append(message)
    return out


def without_reasoning(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages less a tool round's ``reasoning`` and a turn's kept thinking: for chat templates that never had
    it, and for remote servers (OpenAI's refuses fields it doesn't know in a message)."""
    return [{key: value for key, value in message.items() if key not in ("reasoning", "kept_thinking")}
            for message in messages]


def _with_object_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function") or {})
    if isinstance(function.get("arguments"), str):
        try:
            function["arguments"] = json.loads(function["arguments"])
        except (ValueError, RecursionError):
            pass  # not JSON, or nested past the parser's depth ("[" * 200000): the template gets the text
    return {**call, "function": function}


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def vllm_request(offer: ToolOffer) -> Any:
    """vLLM's ChatCompletionRequest for the offer: its tool parsers and schema builder take one."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": ""}],
                                                 "tools": list(offer.tools), "tool_choice": offer.choice})


def forced_schema(offer: ToolOffer) -> dict[str, Any] | None:
    """The JSON schema a forced call is generated under (vLLM's own builder), or None for "auto"."""
    if not offer.forced:
        return None
    from vllm.tool_parsers.utils import get_json_schema_from_tools

    request = vllm_request(offer)
    schema = get_json_schema_from_tools(request.tool_choice, request.tools, request.parallel_tool_calls)
    return json.loads(schema) if isinstance(schema, str) else schema


def calls_from_forced_json(text: str, offer: ToolOffer) -> list[ToolCall]:
    """The calls a forced answer holds: a named function's arguments, or [{"name", "parameters"}, …].
    Text that isn't such JSON (a reply cut by its token limit) holds none."""
    try:
        value = json.loads(text)
    except ValueError:
        return []
    if (name := offer.forced_name) is not None:
        return [ToolCall(new_call_id(), name, json.dumps(value, ensure_ascii=False))] if isinstance(value, dict) else []
    if not isinstance(value, list):
        return []
    return [ToolCall(new_call_id(), str(item["name"]), json.dumps(item.get("parameters", {}), ensure_ascii=False))
            for item in value if isinstance(item, dict) and isinstance(item.get("name"), str)]


def vllm_parse(parser_name: str, tokenizer: Any, offer: ToolOffer) -> Parse:
    """A Parse through vLLM's tool parser ``parser_name`` (ToolParserManager), as its server runs it."""
    from vllm.tool_parsers import ToolParserManager

    request = vllm_request(offer)
    parser = ToolParserManager.get_tool_parser(parser_name)(tokenizer, request.tools)
    request = parser.adjust_request(request)

    def parse(text: str) -> tuple[str, list[ToolCall]]:
        info = parser.extract_tool_calls(text, request)  # type: ignore[arg-type]
        if not info.tools_called or not info.tool_calls:
            # No call: the parser's content (the text less any framing it drops), never nothing for text
            return info.content or text, []
        calls = [ToolCall(call.id or new_call_id(), call.function.name, call.function.arguments or "{}")
                 for call in info.tool_calls]
        return info.content or "", calls

    return parse


def _marker_cut(text: str, starts: Sequence[str]) -> tuple[int, bool]:
    """Where text must stop streaming: (index, True) at a whole start marker; (index, False) where a
    marker's beginning may be cut off at the end; (len, False) when nothing looks like a call."""
    found = [i for i in (text.find(m) for m in starts) if i >= 0]
    if found:
        return min(found), True
    for start in range(max(0, len(text) - max(len(m) for m in starts) + 1), len(text)):
        if any(m.startswith(text[start:]) for m in starts):
            return start, False
    return len(text), False


class _Held:
    """One pane's text: what streamed, and what is held back since a call may have begun."""

    def __init__(self, starts: Sequence[str], hold_all: bool = False) -> None:
        self.starts = starts
        self.sent = ""
        self.held = ""
        self.holding = hold_all

    def feed(self, text: str) -> str:
        """Take a delta; return the part that can stream now."""
        if self.holding:
            self.held += text
            return ""
        pending = self.held + text
        cut, whole = _marker_cut(pending, self.starts)
        self.held, out = pending[cut:], pending[:cut]
        self.holding = whole
        self.sent += out
        return out


class ToolCallGate:
    """Holds back what may be a call, and turns a finished reply's calls into events (see module doc)."""

    def __init__(self, offer: ToolOffer, parse: Parse, parser_name: str = DEFAULT_PARSER) -> None:
        self.offer = offer
        self.parse = parse
        self.starts, self.ends = CALL_MARKERS.get(parser_name, CALL_MARKERS[DEFAULT_PARSER])
        starts = self.starts
        self.thinking = _Held(starts)
        # a forced answer is the call's JSON, a framed one the parser's to unframe: all held
        self.answer = _Held(starts, hold_all=offer.forced or parser_name in FRAMED_ANSWER)

    def feed(self, event: EngineEvent) -> list[EngineEvent]:
        if isinstance(event, ThinkingDelta):
            text = self.thinking.feed(event.text)
            return [ThinkingDelta(event.request_id, text)] if text else []
        if isinstance(event, AnswerDelta):
            text = self.answer.feed(event.text)
            return [AnswerDelta(event.request_id, text)] if text else []
        if isinstance(event, Finished):
            return self._finish(event)
        return [event]

    def _finish(self, finished: Finished) -> list[EngineEvent]:
        rid = finished.request_id
        events: list[EngineEvent] = []
        calls: list[ToolCall] = []
        answer_tail, thinking_tail = self.answer.held, self.thinking.held
        if finished.reason in ("abort", "error"):
            pass  # a reply that didn't finish holds no call to run: its text is released as it was
        elif self.offer.forced:
            calls = calls_from_forced_json(answer_tail, self.offer)
            if calls:
                answer_tail = ""
        else:
            answer_tail, calls = self._parsed(answer_tail)
            if not calls and answer_tail.strip() in self.starts:
                answer_tail = ""  # a reply cut right after a call's opener: markup, not an answer
            if not calls and thinking_tail:
                before, calls = self._parsed(thinking_tail)
                if calls:  # a call drafted inside the thinking: taken, and its markup cut out
                    thinking_tail = before + self._after_calls(thinking_tail)
        if thinking_tail:
            events.append(ThinkingDelta(rid, thinking_tail))
        if answer_tail:
            events.append(AnswerDelta(rid, answer_tail))
        for index, call in enumerate(calls):
            events.append(ToolCallDelta(rid, index, call.id, call.name, call.arguments))
        reason = "tool_calls" if calls else finished.reason
        # Text released as it was held keeps the reply's own record of it.
        thinking = (finished.thinking_text if thinking_tail == self.thinking.held
                    else (self.thinking.sent + thinking_tail).strip())
        answer = finished.answer_text if answer_tail == self.answer.held else self.answer.sent + answer_tail
        events.append(replace(finished, reason=reason, tool_calls=tuple(calls), thinking_text=thinking,
                              answer_text=answer))
        return events

    def _parsed(self, text: str) -> tuple[str, list[ToolCall]]:
        if not text:
            return text, []
        try:
            return self.parse(text)
        except Exception:  # a parser's bug must not lose the reply: the text stays text
            log.exception("the tool parser failed; the reply's text is kept as text")
            return text, []

    def _after_calls(self, text: str) -> str:
        """What the model wrote after its last call's end marker (thinking that went on)."""
        ends = [text.rfind(end) + len(end) for end in self.ends if end in text]
        return text[max(ends):] if ends else ""


def gate_for(parser_name: str, tokenizer: Any, offer: ToolOffer) -> ToolCallGate:
    """A gate with vLLM's parser ``parser_name``; hermes when that one can't load with this tokenizer
    (its special tokens are missing from the vocabulary). gpt-oss's ``openai`` parser is a stub in vLLM: its calls
    are parsed by vLLM's HarmonyParser (harmony.harmony_parse)."""
    if parser_name == HARMONY_TOOL_PARSER:
        return ToolCallGate(offer, harmony_parse(tokenizer, offer.tools), parser_name)
    try:
        return ToolCallGate(offer, vllm_parse(parser_name, tokenizer, offer), parser_name)
    except Exception as exc:
        log.warning("tool parser %s failed to load (%s); using %s", parser_name, exc, DEFAULT_PARSER)
        return ToolCallGate(offer, vllm_parse(DEFAULT_PARSER, tokenizer, offer), DEFAULT_PARSER)
