"""Engine failures as values the UI can show: what went wrong and what fixes it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields

from app.core.settings.redaction import redact
from app.core.settings.settings import KV_FALLBACK, EngineConfig, KvCacheDtype, SpeculativeMethod, changed


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
    GPU_TOO_OLD = "GPU too old for this model's weights"
    SPECULATION_UNSUPPORTED = "speculative decoding method refused by vLLM"
    BAD_SERVER_ANSWER = "a remote server's answer Nalar can't use"


@dataclass(frozen=True)
class EngineFix:
    """A change to the engine settings that a retry tries (None: left as it is). Empty: nothing to try."""

    kv_cache_dtype: KvCacheDtype | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    speculative_method: SpeculativeMethod | None = None

    def changes(self) -> dict[str, object]:
        """The fields it sets, as ``Settings.with_engine`` takes them (validated there)."""
        return {f.name: value for f in fields(self) if (value := getattr(self, f.name)) is not None}

    def applied_to(self, config: EngineConfig) -> EngineConfig:
        return changed(config, **self.changes())

    def describe(self) -> str:
        """"kv_cache_dtype = auto, …" for the banner's retry action."""
        return ", ".join(f"{name} = {value}" for name, value in self.changes().items())

    def __bool__(self) -> bool:
        return bool(self.changes())


NO_FIX = EngineFix()
USE_KV_FALLBACK = EngineFix(kv_cache_dtype=KV_FALLBACK)
NO_SPECULATION = EngineFix(speculative_method="off")


class EngineFailure(Exception):
    """A typed engine error. ``fallback`` is a config change that is known to work, if any.

    Its message and fix may quote outside text (a server's error, which can echo the request's API key):
    Nalar's own secrets are blanked out of both here, whoever builds the failure."""

    def __init__(self, kind: FailureKind, message: str, fix: str, fallback: EngineFix = NO_FIX) -> None:
        message, fix = redact(message), redact(fix)
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.fix = fix
        self.fallback = fallback

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled across the engine process's pipe; Exception's default would pass only the message.
        return (EngineFailure, (self.kind, self.message, self.fix, self.fallback))

    def __str__(self) -> str:
        return f"{self.message} — {self.fix}"

    def __repr__(self) -> str:
        return f"EngineFailure({self.kind.name}, {self.message!r})"


def kv_dtype_unsupported(reason: str, fix: str = "Use KV cache dtype 'auto' (bf16) on this machine."
                         ) -> EngineFailure:
    """The one failure for a KV dtype this machine can't run, judged before vLLM or read from its log."""
    return EngineFailure(FailureKind.KV_DTYPE_UNSUPPORTED, reason, fix, USE_KV_FALLBACK)


def engine_stopped(*, mid_reply: bool = True) -> EngineFailure:
    """The engine (its process, or vLLM's EngineCore) stopped by itself: one message, whoever notices."""
    kept = "the partial answer is kept" if mid_reply else "your conversations are kept"
    return EngineFailure(FailureKind.ENGINE_DIED, "The engine process stopped unexpectedly.",
                         f"Restart the engine; {kept}.")
