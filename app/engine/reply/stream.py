"""ReplyStream: the accounting every backend's ``generate()`` shares.

One object per reply. A backend feeds it each delta (its phase, token count or ids, and the
split text); it keeps the two texts, time to first token, per-phase counts and rates, builds
``Metrics`` and the standard endings (finished, aborted, failed). The loop guard watches each
phase's tokens here, so every backend has it; a backend only says how it can act on a loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from app.core.settings.settings import LoopGuardConfig, SamplingConfig
from app.engine.errors import EngineFailure
from app.engine.events import (
    AnswerDelta,
    EngineErrorEvent,
    EngineEvent,
    Finished,
    FinishReason,
    LoopDetected,
    LoopOutcome,
    Metrics,
    SpecDecodeFigures,
    ThinkingDelta,
    ToolCall,
)
from app.engine.reply.loop_guard import Loop, LoopDetector
from app.engine.reply.reasoning import ReplyTexts, Split, ThinkTagSplitter
from app.engine.requests import Resume

Phase = Literal["thinking", "answer"]
METRICS_INTERVAL_S = 0.1


@dataclass(frozen=True)
class KvFigures:
    """What the scheduler says about the KV cache at this moment (zeros where a backend can't tell)."""

    usage: float = 0.0
    running: int = 0
    waiting: int = 0
    speculation: SpecDecodeFigures | None = None  # counted since the engine started; None: it doesn't speculate


class PhaseRate:
    """Smoothed tokens/s and ms/token for one phase, from delta arrival times."""

    ALPHA = 0.3

    def __init__(self) -> None:
        self.tokens = 0
        self._last: float | None = None
        self._ema_ms: float | None = None

    def add(self, now: float, tokens: int) -> None:
        if tokens <= 0:
            return
        if self._last is not None:
            ms = (now - self._last) * 1000.0 / tokens
            self._ema_ms = ms if self._ema_ms is None else self._ema_ms + self.ALPHA * (ms - self._ema_ms)
        self._last = now
        self.tokens += tokens

    def restart_clock(self, now: float) -> None:
        """A new request continues this phase: the gap is not a token interval."""
        self._last = now

    @property
    def ms_per_token(self) -> float:
        return self._ema_ms or 0.0

    @property
    def tok_s(self) -> float:
        return 1000.0 / self._ema_ms if self._ema_ms else 0.0


class ReplyStream:
    """Accounting for one reply. ``prompt_tokens`` may be set later (remote servers report it last)."""

    def __init__(self, request_id: str, *, prompt_tokens: int = 0, max_model_len: int = 0,
                 kv_capacity_tokens: int = 0, kv: Callable[[], KvFigures] = KvFigures,
                 sampling: SamplingConfig | None = None) -> None:
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self.max_model_len = max_model_len
        self.kv_capacity_tokens = kv_capacity_tokens
        self._kv = kv
        self._spec_start: SpecDecodeFigures | None = None  # the engine's counters at this reply's first metrics
        self.started = time.perf_counter()
        self.first_token_at: float | None = None
        self.rates: dict[Phase, PhaseRate] = {"thinking": PhaseRate(), "answer": PhaseRate()}
        self.texts = ReplyTexts()
        self.phase: Phase = "thinking"
        self._last_metrics = 0.0
        self.guard = sampling.loop_guard if sampling is not None and sampling.loop_guard.enabled else None
        self._budget: dict[Phase, int] = {"thinking": sampling.think_budget if sampling else 0,
                                          "answer": sampling.max_tokens if sampling else 0}
        self._detectors: dict[Phase, LoopDetector] = {}
        self.loop: tuple[Phase, Loop] | None = None  # found, not yet acted on: see act_on_loop
        self.loops: list[LoopDetected] = []
        self.resamples = 0
        # vLLM's prefix-cache hit on the reply's first request: (cached tokens, tokens sent); 0s until known
        self.prefix_cache = (0, 0)

    # ---- feeding ---------------------------------------------------------------------------

    def resume_from(self, resume: Resume, thinking_tokens: int = 0) -> None:
        """The reply goes on after a cut one's kept text: its texts start with it (no events: the UI has it).
        ``thinking_tokens``: the kept thinking's, which the think budget covers too."""
        self.rates["thinking"].tokens = thinking_tokens
        self.texts.start_from(resume.thinking, resume.answer if resume.phase == "answer" else "")

    def step(self, phase: Phase, part: Split, tokens: int | Sequence[int],
             now: float | None = None) -> list[EngineEvent]:
        """Count one delta of ``phase`` (a token count, or its token ids) and take its text.

        Returns the events that carry its text. If the loop guard fires, ``self.loop`` is set and
        the backend calls ``act_on_loop`` before its next delta.
        """
        now = time.perf_counter() if now is None else now
        count = tokens if isinstance(tokens, int) else len(tokens)
        if count and self.first_token_at is None:
            self.first_token_at = now
        self.phase = phase
        self.rates[phase].add(now, count)
        events = self.texts.take(self.request_id, part)
        if self.guard is not None and count and self.loop is None:
            self._watch(phase, events, tokens)
        return events

    def _watch(self, phase: Phase, events: list[EngineEvent], tokens: int | Sequence[int]) -> None:
        assert self.guard is not None
        detector = self._detectors.get(phase)
        if detector is None:
            detector = self._detectors[phase] = LoopDetector(self.guard)
        kind = ThinkingDelta if phase == "thinking" else AnswerDelta
        text = "".join(e.text for e in events if isinstance(e, kind))
        ids = [hash(text)] * tokens if isinstance(tokens, int) else tokens  # no ids (remote): a key per chunk
        found = detector.feed(ids, text, watch=self.generated_tokens >= self.guard.start_after_tokens)
        if found is not None:
            self.loop = (phase, found)

    def act_on_loop(self, *, can_conclude: bool = True, can_resample: bool = True) -> LoopDetected:
        """Decide what the found loop costs the reply, cut its text, and return the event that says so.

        Thinking: the configured action, falling back from resample to conclude to stop as the
        backend allows; the thinking is kept up to where the loop began. Answer: the reply is cut
        after the loop's first copy. Warn only: nothing is cut and that phase is no longer watched.
        """
        assert self.loop is not None and self.guard is not None
        (phase, loop), self.loop = self.loop, None
        detector = self._detectors[phase]
        action = self.guard.action
        outcome: LoopOutcome
        if action == "warn":
            outcome = "warned"
        elif phase == "answer":
            outcome = "cut"
        elif action == "resample" and can_resample and self.resamples < self.guard.max_resamples:
            outcome = "resampled"
        elif action in ("conclude", "resample") and can_conclude:
            outcome = "concluded"
        else:
            outcome = "stopped"
        left = {p: max(0, self._budget[p] - self.rates[p].tokens) for p in self.rates}
        saved = {"warned": 0, "resampled": 0, "concluded": left["thinking"], "cut": left["answer"],
                 "stopped": left["thinking"] + self._budget["answer"]}[outcome]
        keep_token, keep_char = ((loop.first_copy_end_token, loop.first_copy_end_char) if outcome == "cut"
                                 else (loop.start_token, loop.start_char))
        event = LoopDetected(self.request_id, phase, loop.kind, loop.period, loop.copies, loop.start_token,
                             loop.start_char, keep_char if outcome != "warned" else detector.chars,
                             detector.tokens, detector.chars, outcome, saved)
        if outcome == "warned":
            self._detectors[phase] = LoopDetector(self.guard, off=True)
        else:
            self.rewind(phase, keep_token, keep_char)
        self.resamples += outcome == "resampled"
        self.loops.append(event)
        return event

    def rewind(self, phase: Phase, tokens: int, chars: int) -> None:
        """Keep a phase's text up to ``chars`` (its first ``tokens`` tokens); the detector goes on from there."""
        self.texts.cut(phase, chars)
        detector = self._detectors.get(phase)
        if detector is not None:
            detector.rewind(tokens, chars)

    def restart_clock(self, phase: Phase) -> None:
        self.rates[phase].restart_clock(time.perf_counter())

    @property
    def generated_tokens(self) -> int:
        return self.rates["thinking"].tokens + self.rates["answer"].tokens

    # ---- metrics and endings ---------------------------------------------------------------

    def metrics(self, phase: Phase | None = None) -> Metrics:
        thinking, answer = self.rates["thinking"], self.rates["answer"]
        kv = self._kv()
        return Metrics(
            request_id=self.request_id, phase=phase or self.phase,
            thinking_tokens=thinking.tokens, answer_tokens=answer.tokens,
            thinking_tok_s=thinking.tok_s, answer_tok_s=answer.tok_s,
            thinking_ms_per_token=thinking.ms_per_token, answer_ms_per_token=answer.ms_per_token,
            ttft_s=None if self.first_token_at is None else self.first_token_at - self.started,
            prompt_tokens=self.prompt_tokens, context_tokens=self.prompt_tokens + self.generated_tokens,
            max_model_len=self.max_model_len, kv_usage=kv.usage, kv_capacity_tokens=self.kv_capacity_tokens,
            running_requests=kv.running, waiting_requests=kv.waiting, speculation=self._speculation(kv),
            cached_prompt_tokens=self.prefix_cache[0], sent_prompt_tokens=self.prefix_cache[1])

    def _speculation(self, kv: KvFigures) -> SpecDecodeFigures | None:
        """This reply's share of the engine's counters (concurrent replies share the steps they ran in)."""
        if kv.speculation is None:
            return None
        if self._spec_start is None:  # read lazily: a backend's kv() may need this stream built
            self._spec_start = kv.speculation
        return kv.speculation.since(self._spec_start)

    def due_metrics(self, now: float | None = None) -> Metrics | None:
        """Metrics at most every METRICS_INTERVAL_S, for the gauges."""
        now = time.perf_counter() if now is None else now
        if now - self._last_metrics < METRICS_INTERVAL_S:
            return None
        self._last_metrics = now
        return self.metrics()

    def finished(self, reason: FinishReason, tool_calls: tuple[ToolCall, ...] = ()) -> list[EngineEvent]:
        """The normal end: final metrics, then Finished (with the calls the reply ends in, if any)."""
        final = self.metrics("answer")
        return [final, replace(self._finished(reason, final), tool_calls=tool_calls)]

    def aborted(self) -> Finished:
        """Cancelled from outside (the consumer went away): the text so far, as an abort."""
        return self._finished("abort", self.metrics("answer"))

    def failed(self, failure: EngineFailure) -> list[EngineEvent]:
        """What went wrong, then Finished with the partial reply kept."""
        return [EngineErrorEvent(self.request_id, failure), self._finished("error", self.metrics("answer"))]

    def _finished(self, reason: FinishReason, metrics: Metrics) -> Finished:
        return Finished(self.request_id, reason, self.texts.thinking_text, self.texts.answer_text, metrics,
                        tuple(self.loops))


def first_loop(deltas: Iterable[tuple[Sequence[int], str]], guard: LoopGuardConfig, *,
               prompt_opened_think: bool) -> tuple[Phase, Loop] | None:
    """Where the loop guard would fire on a recorded stream (each delta's token ids and text), watched as a
    reply is: split at ``</think>``, each phase its own detector, checks from the reply's
    ``start_after_tokens`` on. None: it would not fire."""
    reply = ReplyStream("recorded", sampling=SamplingConfig(loop_guard=guard))
    splitter = ThinkTagSplitter(prompt_opened_think=prompt_opened_think)
    for ids, text in deltas:
        phase: Phase = "thinking" if splitter.in_thinking else "answer"
        reply.step(phase, splitter.feed(text, ids), ids)
        if reply.loop is not None:
            return reply.loop
    return None
