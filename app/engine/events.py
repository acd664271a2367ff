"""Typed events the engine layer emits, as plain dataclasses (no Qt).

The UI's bridge turns them into Qt signals; the CLI prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from app.core.settings.settings import EngineConfig
from app.engine.errors import EngineFailure

# loop: cut by the loop guard; tool_calls: the reply ends in calls the caller is to run (Finished.tool_calls)
FinishReason = Literal["stop", "length", "abort", "error", "loop", "tool_calls"]
LoopOutcome = Literal["concluded", "resampled", "stopped", "warned", "cut"]


@dataclass(frozen=True)
class StatusChanged:
    """Engine lifecycle: loading progress, ready, stopped, failed."""

    state: Literal["idle", "loading", "ready", "stopping", "stopped", "failed"]
    message: str
    progress: float | None = None  # 0..1, or None while it can't be estimated


@dataclass(frozen=True)
class StartPlan:
    """What a local start runs with, decided once in the engine process where the facts are (the KV dtype
    judged for this machine, the context and memory share fitted to what is free now, the kernels), and why.

    ``config`` may differ from the settings for this start only (other programs hold VRAM now); ``notes`` say
    how and why, one sentence each.
    """

    config: EngineConfig
    attention_backend: str | None = None  # what vLLM is expected to choose on a GPU; None on the CPU engine
    flashinfer_sampler: bool = False  # FlashInfer's top-k/top-p sampler (GPU only; off without its kernels)
    notes: tuple[str, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()  # (name, value): what the engine and its children run with

    def describe(self) -> str:
        """The plan in a few lines, for the KV gauge's tooltip and the log."""
        config = self.config
        lines = [f"This start: KV cache {config.kv_cache_dtype}, context {config.max_model_len:,} tokens"
                 + (f", attention {self.attention_backend}" if self.attention_backend else "")
                 + (", FlashInfer sampler" if self.flashinfer_sampler else "") + "."]
        return "\n".join([*lines, *self.notes])


@dataclass(frozen=True)
class SpeculationVerdict:
    """One speculative-decoding method judged by vLLM's own config validation for this start's model and KV
    dtype (app.engine.machine.speculation): ``reason`` is vLLM's refusal, None when it accepts the method."""

    method: str
    reason: str | None

    @property
    def works(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class SpecDecodeFigures:
    """vLLM's speculative-decoding counters (SchedulerStats.spec_decoding_stats), summed over a span of steps."""

    drafts: int = 0  # verification steps that carried proposed tokens
    draft_tokens: int = 0
    accepted_tokens: int = 0

    @property
    def acceptance_rate(self) -> float:
        """Share of proposed tokens the target model accepted."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens gained per verification step: the accepted ones plus the one the target adds (vLLM's figure)."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else 0.0

    def since(self, start: SpecDecodeFigures) -> SpecDecodeFigures:
        return SpecDecodeFigures(self.drafts - start.drafts, self.draft_tokens - start.draft_tokens,
                                 self.accepted_tokens - start.accepted_tokens)


@dataclass(frozen=True)
class EngineReady:
    """The engine is loaded; capacity figures come from vLLM's own config.

    ``backend`` says which kind answers ("local" or "remote"); ``kv_cache_dtype`` is the local engine's
    dtype ("" for a remote one, whose cache Nalar can't see). ``plan`` is the local start's StartPlan.
    """

    model: str
    kv_cache_dtype: str
    max_model_len: int
    kv_capacity_tokens: int
    max_concurrency: float
    load_seconds: float
    backend: Literal["local", "remote"] = "local"
    plan: StartPlan | None = None
    speculation: tuple[SpeculationVerdict, ...] = ()  # every method, as vLLM judged it at this start
    reads_images: bool = False  # one of vLLM's multimodal models (its registry's verdict): images may go in


@dataclass(frozen=True)
class ThinkingDelta:
    request_id: str
    text: str


@dataclass(frozen=True)
class AnswerDelta:
    request_id: str
    text: str


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for, in OpenAI's terms: ``arguments`` is JSON text (an object)."""

    id: str
    name: str
    arguments: str

    def as_openai(self) -> dict[str, object]:
        """The assistant message's ``tool_calls`` item, as chat templates and OpenAI clients take it."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class ToolCallDelta:
    """A call as it streams: the first delta of call ``index`` carries its id and name, later ones more
    of its arguments' JSON text. Finished.tool_calls holds the whole calls."""

    request_id: str
    index: int
    id: str | None
    name: str | None
    arguments_delta: str


@dataclass(frozen=True)
class ContextTrimmed:
    """Oldest turns were dropped so the conversation fits the context."""

    request_id: str
    dropped_messages: int


@dataclass(frozen=True)
class Metrics:
    request_id: str
    phase: Literal["thinking", "answer"]
    thinking_tokens: int
    answer_tokens: int
    thinking_tok_s: float  # smoothed live rate while that phase streams
    answer_tok_s: float
    thinking_ms_per_token: float
    answer_ms_per_token: float
    ttft_s: float | None
    prompt_tokens: int
    context_tokens: int  # prompt plus everything generated so far
    max_model_len: int
    kv_usage: float  # 0..1, from vLLM's scheduler stats
    kv_capacity_tokens: int
    running_requests: int = 0
    waiting_requests: int = 0
    speculation: SpecDecodeFigures | None = None  # this reply's, when the engine speculates
    # vLLM's own count (RequestOutput.num_cached_tokens) of the reply's first request: of the tokens sent
    # (the prompt, and a resumed reply's kept text), how many the prefix cache held; 0 where unknown (a server
    # that reports no prompt_tokens_details)
    cached_prompt_tokens: int = 0
    sent_prompt_tokens: int = 0


@dataclass(frozen=True)
class LoopDetected:
    """The loop guard found a reply repeating itself, and what it did about it.

    Token indices count from the phase's first token; characters index the phase's text as
    streamed, so a view can collapse the repeated span (``start_char`` to ``detected_char``).
    """

    request_id: str
    phase: Literal["thinking", "answer"]
    kind: Literal["exact", "drift"]  # drift: near-duplicate sentences whose wording changes
    period: int  # tokens per copy
    copies: int
    start_token: int  # where the loop began
    start_char: int
    kept_char: int  # the phase text is kept up to here (the loop's start, or its first copy's end)
    detected_token: int  # how far the phase had got when the guard fired
    detected_char: int
    outcome: LoopOutcome
    tokens_saved: int = 0  # what the request could still have spent

    def summary(self) -> str:
        """e.g. "looped: one 48-token passage ×4 from token 1,210 · concluded · 2,300 tokens saved"."""
        drift = ", wording drifting" if self.kind == "drift" else ""
        where = "the thinking" if self.phase == "thinking" else "the answer"
        saved = f" · {self.tokens_saved:,} tokens saved" if self.tokens_saved else ""
        return (f"looped: one {self.period}-token passage ×{self.copies}{drift} in {where} from token "
                f"{self.start_token:,} · {self.outcome}{saved}")


@dataclass(frozen=True)
class Finished:
    request_id: str
    reason: FinishReason
    thinking_text: str
    answer_text: str
    metrics: Metrics | None = None
    loops: tuple[LoopDetected, ...] = ()  # what the loop guard found and did in this reply
    tool_calls: tuple[ToolCall, ...] = ()  # reason "tool_calls": the calls to run, in order


@dataclass(frozen=True)
class BackendChosen:
    """Which backend answers this request ("local" or a profile name), and why, when it is the fallback."""

    request_id: str
    backend: str
    reason: str = ""


@dataclass(frozen=True)
class EngineErrorEvent:
    request_id: str | None
    failure: EngineFailure = field(compare=False)


EngineEvent = (StatusChanged | EngineReady | ThinkingDelta | AnswerDelta | ContextTrimmed
               | Metrics | Finished | EngineErrorEvent | BackendChosen | LoopDetected | ToolCallDelta)
