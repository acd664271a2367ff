"""What a remote server's answers may be: their size and types, checked before use.

A remote server is outside Nalar: a figure it gives (a context length, a token list) is checked for type and
range, an answer is read to a bound, and one that fails is a failure naming the endpoint, the server's fault
with the server's fix, never an exception that reads as the engine's.
"""

from __future__ import annotations

from app.engine.errors import EngineFailure, FailureKind

# Past the longest context any served model has (Llama 4 Scout's 10M tokens): a larger figure is not a context.
MAX_CONTEXT_TOKENS = 1 << 24
MAX_TOKEN_ID = (1 << 31) - 1  # vLLM's ids are int32; no vocabulary comes near


def context_length(value: object) -> int | None:
    """A server's ``max_model_len`` as a token count; None when it is not one (a whole number in 1..2^24)."""
    if type(value) is int and 0 < value <= MAX_CONTEXT_TOKENS:
        return value
    return None


def bad_answer(endpoint: str, what: str) -> EngineFailure:
    """A server's answer that Nalar can't use: the server's fault, so the fix is the server's."""
    return EngineFailure(FailureKind.BAD_SERVER_ANSWER, f"{endpoint} answered {what}.",
                         f"Check the server at {endpoint} and its log: Nalar expects the answers a vLLM "
                         "(OpenAI-compatible) server gives. Nothing on this machine needs changing.")
