"""Engine failures as values the UI can show: what went wrong and what fixes it."""

from __future__ import annotations

import enum


class FailureKind(enum.Enum):
    MODEL_NOT_FOUND = "model not found"
    KV_DTYPE_UNSUPPORTED = "KV cache dtype unsupported here"
    OUT_OF_MEMORY = "out of memory"
    ENGINE_DIED = "engine stopped"
    ENGINE_START_FAILED = "engine failed to start"
    PROMPT_TOO_LONG = "prompt too long"
    BAD_MESSAGES = "messages the chat template refuses"
    BAD_SCHEMA = "a JSON schema the grammar engine refuses"
    REQUEST_FAILED = "request failed"
    NOT_READY = "engine not ready"
    UNREACHABLE = "endpoint unreachable"
    UNAUTHORIZED = "API key refused"
    TIMEOUT = "no first token within the budget"
    START_TIMEOUT = "engine start timed out"
    DRIVER_TOO_OLD = "NVIDIA driver too old"
    VRAM_IN_USE = "GPU memory held by other programs"
    KERNELS_MISSING = "GPU kernels missing"
    TOOLCHAIN_MISSING = "C compiler or Python headers missing"
    CONTEXT_TOO_LONG = "context longer than the model's maximum"


class EngineFailure(Exception):
    """A typed engine error. ``fallback`` is a config change that is known to work, if any."""

    def __init__(self, kind: FailureKind, message: str, fix: str,
                 fallback: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.fix = fix
        self.fallback = fallback or {}

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled across the engine process's pipe; Exception's default would pass only the message.
        return (EngineFailure, (self.kind, self.message, self.fix, self.fallback))

    def __str__(self) -> str:
        return f"{self.message} — {self.fix}"

    def __repr__(self) -> str:
        return f"EngineFailure({self.kind.name}, {self.message!r})"


def engine_stopped(*, mid_reply: bool = True) -> EngineFailure:
    """The engine (its process, or vLLM's EngineCore) stopped by itself: one message, whoever notices."""
    kept = "the partial answer is kept" if mid_reply else "your conversations are kept"
    return EngineFailure(FailureKind.ENGINE_DIED, "The engine process stopped unexpectedly.",
                         f"Restart the engine; {kept}.")
