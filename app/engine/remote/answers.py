"""What a remote server's answers may be: their size and types, checked before use.

A remote server is outside Nalar: a figure it gives (a context length, a token list) is checked for type and
range, an answer is read to a bound, and one that fails is a failure naming the endpoint, the server's fault
with the server's fix, never an exception that reads as the engine's.
"""

from __future__ import annotations

import reprlib
from typing import Any

from app.core.settings.redaction import redact
from app.engine.errors import EngineFailure, FailureKind

# Past the longest context any served model has (Llama 4 Scout's 10M tokens): a larger figure is not a context.
MAX_CONTEXT_TOKENS = 1 << 24
MAX_TOKEN_ID = (1 << 31) - 1  # vLLM's ids are int32; no vocabulary comes near


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
