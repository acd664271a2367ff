"""`nalar bench spec`'s arithmetic: per-phase rates, ratios to no speculation, and where greedy text parts.

Greedy decoding with and without speculation should give the same tokens, except that batched
verification computes the same logits in another order: at a near-tie the top two tokens can swap. So
each first divergence is judged by the top-2 log-probability margin at that token in both runs: both
margins small is a near-tie; either one clear is a bug in the speculation (or in how Nalar drives it).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.core.measure.tables import fmt, text_table

# bf16 logits of magnitude ~20 carry ~0.06-0.12 of rounding each: a swap within this many nats is noise.
NEAR_TIE_NATS = 0.25


@dataclass(frozen=True)
class PhaseRun:
    """One reply's decode with one method: thinking and answer timed separately (first to last delta)."""

    method: str
    prompt: str
    thinking_tokens: int
    thinking_s: float
    answer_tokens: int
    answer_s: float
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0

    @property
    def thinking_tok_s(self) -> float:
        return (self.thinking_tokens - 1) / self.thinking_s if self.thinking_s > 0 else 0.0

    @property
    def answer_tok_s(self) -> float:
        return (self.answer_tokens - 1) / self.answer_s if self.answer_s > 0 else 0.0


@dataclass(frozen=True)
class Divergence:
    """Where a method's greedy tokens first differ from no speculation's, and the top-2 margin there in each."""

    method: str
    prompt: str
    token_index: int | None  # None: the same tokens all the way
    char_index: int | None
    margin_none: float | None  # nats between the top two candidates, in the run without speculation
    margin_method: float | None

    @property
    def near_tie(self) -> bool:
        """No divergence, or one at a near-tie in both runs."""
        if self.token_index is None:
            return True
        return (self.margin_none is not None and self.margin_method is not None
                and self.margin_none <= NEAR_TIE_NATS and self.margin_method <= NEAR_TIE_NATS)


def top2_margin(candidates: dict[int, float]) -> float | None:
    """Log-probability of the likeliest candidate minus the second's (None with fewer than two)."""
    best = sorted(candidates.values(), reverse=True)
    return best[0] - best[1] if len(best) >= 2 else None


def first_divergence(method: str, prompt: str, base: Sequence[int], other: Sequence[int],
                     base_logprobs: Sequence[dict[int, float]], other_logprobs: Sequence[dict[int, float]],
                     decode: Callable[[list[int]], str]) -> Divergence:
    """The first index where the two greedy token streams differ, and the margins there."""
    index = next((i for i, (a, b) in enumerate(zip(base, other)) if a != b), None)
    if index is None:
        return Divergence(method, prompt, None, None, None, None)
    def margin(logprobs: Sequence[dict[int, float]]) -> float | None:
        return top2_margin(logprobs[index]) if index < len(logprobs) else None

    return Divergence(method, prompt, index, len(decode(list(base[:index]))), margin(base_logprobs),
                      margin(other_logprobs))


@dataclass(frozen=True)
class MethodSummary:
    method: str
    thinking_tok_s: float
    answer_tok_s: float
    thinking_ratio: float | None
    answer_ratio: float | None
    acceptance_rate: float | None
    mean_accepted_length: float | None


def summarise(runs: Sequence[PhaseRun]) -> list[MethodSummary]:
    """Medians per method over prompts and repeats, and their ratios to no speculation ("off")."""
    methods = list(dict.fromkeys(r.method for r in runs))

    def median(method: str, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in runs if r.method == method)

    off = ({"thinking": median("off", "thinking_tok_s"), "answer": median("off", "answer_tok_s")}
           if "off" in methods else None)
    out = []
    for method in methods:
        mine = [r for r in runs if r.method == method]
        drafts, drafted, accepted = (sum(r.drafts for r in mine), sum(r.draft_tokens for r in mine),
                                     sum(r.accepted_tokens for r in mine))
        thinking, answer = median(method, "thinking_tok_s"), median(method, "answer_tok_s")
        out.append(MethodSummary(
            method, thinking, answer,
            thinking / off["thinking"] if off and off["thinking"] else None,
            answer / off["answer"] if off and off["answer"] else None,
            accepted / drafted if drafted else None, 1 + accepted / drafts if drafts else None))
    return out


HEADERS = ["method", "thinking tok/s", "× off", "answer tok/s", "× off", "accepted", "tok/step"]
DIVERGENCE_HEADERS = ["method", "prompt", "parts at token", "char", "margin off", "margin method", "verdict"]


def summary_rows(summaries: Sequence[MethodSummary]) -> list[list[str]]:
    return [[s.method, fmt(s.thinking_tok_s, ".1f"), fmt(s.thinking_ratio, ".2f"), fmt(s.answer_tok_s, ".1f"),
             fmt(s.answer_ratio, ".2f"), fmt(s.acceptance_rate, ".0%"), fmt(s.mean_accepted_length, ".2f")]
            for s in summaries]


def divergence_rows(divergences: Sequence[Divergence]) -> list[list[str]]:
    return [[d.method, d.prompt, "never" if d.token_index is None else str(d.token_index),
             fmt(d.char_index, ".0f"), fmt(d.margin_none, ".3f"), fmt(d.margin_method, ".3f"),
             "same" if d.token_index is None else ("near-tie" if d.near_tie else "CLEAR MARGIN: a bug")]
            for d in divergences]


def report_text(summaries: Sequence[MethodSummary], divergences: Sequence[Divergence]) -> str:
    return "\n\n".join([text_table(HEADERS, summary_rows(summaries)),
                        text_table(DIVERGENCE_HEADERS, divergence_rows(divergences))])
