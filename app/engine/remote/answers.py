"""What a remote server's answers may be: their size and types, checked before use.

A remote server is outside Nalar: a figure it gives (a context length, a model list, a token list, a streamed
tool call) is checked for type and range, an answer is read to a bound, and one that fails is a failure naming
the endpoint, the server's fault with the server's fix, never an exception that reads as the engine's.
"""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from typing import Any

from app.core.settings.redaction import redact
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import EngineEvent, ToolCall, ToolCallDelta
from app.engine.reply.tool_calls import new_call_id

# Past the longest context any served model has (Llama 4 Scout's 10M tokens): a larger figure is not a context.
MAX_CONTEXT_TOKENS = 1 << 24
MAX_TOKEN_ID = (1 << 31) - 1  # vLLM's ids are int32; no vocabulary comes near
MAX_CALL_CHARS = 256 * 1024  # one streamed tool call's name and arguments
MAX_CALLS = 64  # tool calls in one reply


def context_length(value: object) -> int | None:
    """A server's ``max_model_len`` as a token count; None when it is not one (a whole number in 1..2^24)."""
    if type(value) is int and 0 < value <= MAX_CONTEXT_TOKENS:
        return value
    return None


def served_models(data: Any, url: str) -> dict[str, Any]:
    """/v1/models' entries by name; a list whose entries are not named models is a bad answer, not a bare
    AttributeError (or a model named 5, or None) at start."""
    if not isinstance(data, list) or not all(isinstance(getattr(entry, "id", None), str) for entry in data):
        raise bad_answer(f"{url.rstrip('/')}/models", 'a model list whose entries are not models named by an "id"')
    return {entry.id: entry for entry in data}


def served_context(model: Any, url: str) -> tuple[int, str]:
    """The context a /v1/models entry gives (0: none, or no entry), and a note when it gives one that is no token
    count ("lots", -1, 1e30, 4096.0): then the context is taken as unknown, as from a server that says nothing,
    since the server can still answer; the note says so, naming the endpoint and the field."""
    value = (getattr(model, "model_extra", None) or {}).get("max_model_len")
    if value is None:
        return 0, ""
    length = context_length(value)
    if length is not None:
        return length, ""
    shown = redact(reprlib.repr(value))
    return 0, (f"{url.rstrip('/')}/models gave max_model_len {shown}, not a token count (a whole number from 1 to "
               f"{MAX_CONTEXT_TOKENS:,}): the model's context is taken as unknown")


def bad_answer(endpoint: str, what: str) -> EngineFailure:
    """A server's answer that Nalar can't use: the server's fault, so the fix is the server's."""
    return EngineFailure(FailureKind.BAD_SERVER_ANSWER, f"{endpoint} answered {what}.",
                         f"Check the server at {endpoint} and its log: Nalar expects the answers a vLLM "
                         "(OpenAI-compatible) server gives. Nothing on this machine needs changing.")


class StreamedCalls:
    """A remote reply's tool_calls deltas (merged by index, as the openai client does) as ToolCallDelta.

    A call's streamed text counts toward no token budget and the loop guard doesn't watch it, so a server (or a
    model looping in a call) could stream one for ever: a call past MAX_CALL_CHARS, or a reply past MAX_CALLS
    calls, ends the reply with a failure naming the cap, and no call is run. A delta of the wrong types is the
    server's bad answer."""

    def __init__(self, endpoint: str = "the server") -> None:
        self.endpoint = endpoint  # where the deltas come from, for the failures' messages
        self._calls: dict[int, dict[str, str]] = {}

    def feed(self, rid: str, deltas: Sequence[Any]) -> list[EngineEvent]:
        events: list[EngineEvent] = []
        for delta in deltas:
            index, call_id, name, arguments = self._parts(delta)
            if index not in self._calls and len(self._calls) >= MAX_CALLS:
                raise self._past_cap(f"more than {MAX_CALLS} tool calls in one reply")
            call = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
            if len(call["name"]) + len(call["arguments"]) + len(name or "") + len(arguments) > MAX_CALL_CHARS:
                shown = repr(call["name"][:60]) if call["name"] else "a tool call"
                raise self._past_cap(f"{shown} with more than {MAX_CALL_CHARS:,} characters of name and arguments")
            call["id"] = call["id"] or call_id or ""
            call["name"] += name or ""
            call["arguments"] += arguments
            events.append(ToolCallDelta(rid, index, call_id, name, arguments))
        return events

    def calls(self) -> tuple[ToolCall, ...]:
        return tuple(ToolCall(call["id"] or new_call_id(), call["name"], call["arguments"] or "{}")
                     for _, call in sorted(self._calls.items()))

    def _parts(self, delta: Any) -> tuple[int, str | None, str | None, str]:
        """A delta's index, id, name and arguments, each of its type, or a bad answer."""
        function = getattr(delta, "function", None)
        index = getattr(delta, "index", 0) or 0
        call_id = getattr(delta, "id", None)
        name = getattr(function, "name", None)
        arguments = getattr(function, "arguments", None) or ""
        if type(index) is not int or not 0 <= index <= MAX_TOKEN_ID:
            raise bad_answer(self.endpoint, f"a tool call whose index is {redact(reprlib.repr(index))}")
        if not all(value is None or isinstance(value, str) for value in (call_id, name, arguments)):
            raise bad_answer(self.endpoint, "a tool call whose id, name or arguments are not text")
        return index, call_id, name, arguments

    def _past_cap(self, what: str) -> EngineFailure:
        return EngineFailure(FailureKind.REQUEST_FAILED,
                             f"{self.endpoint} streamed {what}; the reply was ended there, and no call was run.",
                             "The model may be looping in its tool calls: try again, or ask differently. The cap "
                             "is far past any tool's real arguments.")
