"""Context saturation: where more concurrent chats of one length stop fitting in the KV cache, and
where they stop being fast enough. The knee logic, on recorded stat series; no engine, no Qt.

A sweep cell is one context length at one concurrency: a per-step series of the scheduler's figures
(KV use, running, waiting, preemptions so far) and the token arrival times of every request. A row is
one context length over rising concurrency. Dicts appear only at the JSON / job-line edge.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.settings import paths

KV_FULL = 0.95  # KV use at or above this counts as saturated, as a preemption does
LATEST_PROFILE = "saturation-latest.json"


@dataclass(frozen=True)
class StatSample:
    """The scheduler's figures after one engine step."""

    t: float
    kv_usage: float
    running: int
    waiting: int
    preempted: int  # cumulative since the engine started


@dataclass(frozen=True)
class RequestTiming:
    """One request of the sweep: when it was sent, and each output delta's arrival (time, token count)."""

    sent: float
    deltas: tuple[tuple[float, int], ...]
    measured: bool = True  # False for the shortened first requests that stagger the closed loop

    @property
    def tokens(self) -> int:
        return sum(count for _, count in self.deltas)

    @property
    def ttft_s(self) -> float:
        return self.deltas[0][0] - self.sent

    @property
    def ms_per_token(self) -> float | None:
        """Time per output token after the first (vLLM bench's TPOT): stalls from preemption count in it."""
        after_first = self.tokens - self.deltas[0][1]
        if after_first <= 0:
            return None
        return (self.deltas[-1][0] - self.deltas[0][0]) * 1000 / after_first


@dataclass(frozen=True)
class CellSeries:
    """What one cell recorded. ``samples`` starts with the figures just before the first request."""

    context_tokens: int
    concurrency: int
    samples: tuple[StatSample, ...]
    requests: tuple[RequestTiming, ...]


@dataclass(frozen=True)
class CellResult:
    context_tokens: int
    concurrency: int
    requests: int
    peak_kv_usage: float
    preemptions: int
    waited: bool  # some request sat in the scheduler's queue after a step
    waited_for_kv: bool  # ... while the free KV could not hold its prompt
    ms_per_token_p50: float
    ms_per_token_p95: float
    ttft_p50_s: float
    ttft_p95_s: float
    seconds: float
    output_tok_s: float  # all requests together

    @property
    def kv_saturated(self) -> bool:
        return self.preemptions > 0 or self.peak_kv_usage >= KV_FULL or self.waited_for_kv


def percentile(values: Sequence[float], q: int) -> float:
    """The q-th percentile, interpolated between order statistics (one value: itself)."""
    if not values:
        raise ValueError("percentile of no values")
    if len(values) == 1:
        return float(values[0])
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def summarise_cell(series: CellSeries, *, total_blocks: int, block_size: int) -> CellResult:
    """Peak KV use, preemptions, queueing and latency percentiles of one cell."""
    measured = [r for r in series.requests if r.measured and r.deltas]
    tpots = [ms for r in measured if (ms := r.ms_per_token) is not None]
    if not tpots:
        raise ValueError(f"cell {series.context_tokens}x{series.concurrency} has no request with 2+ tokens")
    samples = series.samples
    steps = samples[1:]  # the first sample is the state the previous cell left
    prompt_blocks = math.ceil((series.context_tokens + 1) / block_size)

    def kv_blocked(sample: StatSample) -> bool:
        return sample.waiting > 0 and round((1 - sample.kv_usage) * total_blocks) < prompt_blocks

    ttfts = [r.ttft_s for r in measured]
    started = min(r.sent for r in series.requests)
    ended = max(r.deltas[-1][0] for r in series.requests if r.deltas)
    return CellResult(
        context_tokens=series.context_tokens, concurrency=series.concurrency, requests=len(measured),
        peak_kv_usage=max((s.kv_usage for s in steps), default=0.0),
        preemptions=samples[-1].preempted - samples[0].preempted if samples else 0,
        waited=any(s.waiting > 0 for s in steps), waited_for_kv=any(kv_blocked(s) for s in steps),
        ms_per_token_p50=percentile(tpots, 50), ms_per_token_p95=percentile(tpots, 95),
        ttft_p50_s=percentile(ttfts, 50), ttft_p95_s=percentile(ttfts, 95),
        seconds=ended - started, output_tok_s=sum(r.tokens for r in series.requests) / max(1e-9, ended - started))


@dataclass(frozen=True)
class LatencyTargets:
    """p95 ms/token limits: fixed (a GPU: 100 and 250 ms) or multiples of the row's single-stream p95 (a CPU)."""

    absolute_ms: tuple[float, ...] = ()
    relative: tuple[float, ...] = ()

    def for_row(self, single_stream_p95_ms: float) -> tuple[float, ...]:
        return tuple(sorted((*self.absolute_ms, *(f * single_stream_p95_ms for f in self.relative))))

    def labels(self) -> tuple[str, ...]:
        return tuple(sorted((*(f"{ms:g} ms/token" for ms in self.absolute_ms),
                             *(f"{f:g}x the single-stream ms/token" for f in self.relative))))

    @staticmethod
    def default(on_gpu: bool) -> LatencyTargets:
        return LatencyTargets(absolute_ms=(100.0, 250.0)) if on_gpu else LatencyTargets(relative=(2.0,))


def usable_blocks(capacity_tokens: int, block_size: int) -> int:
    """vLLM keeps one block of the pool as its null block; its KV use is over the rest."""
    return max(0, capacity_tokens // block_size - 1)


def predicted_kv_knee(capacity_tokens: int, block_size: int, context_tokens: int, output_tokens: int) -> int | None:
    """The first concurrency whose chats, all at full length, take ≥ 95% of the pool's usable blocks."""
    total = usable_blocks(capacity_tokens, block_size)
    per_chat = math.ceil((context_tokens + output_tokens) / block_size)
    if total <= 0 or per_chat <= 0:
        return None
    return max(1, math.ceil(KV_FULL * total / per_chat))


@dataclass(frozen=True)
class RowResult:
    """One context length over rising concurrency; the knees are read off its cells."""

    context_tokens: int
    cells: tuple[CellResult, ...]
    targets_ms: tuple[float, ...]
    predicted_kv_knee: int | None

    @property
    def kv_knee(self) -> int | None:
        return next((c.concurrency for c in self.cells if c.kv_saturated), None)

    def latency_knee(self, target_ms: float) -> int | None:
        return next((c.concurrency for c in self.cells if c.ms_per_token_p95 > target_ms), None)

    def most_under(self, target_ms: float) -> int:
        """The most concurrent chats measured under the target before it was first passed (0: not even one)."""
        under = 0
        for cell in self.cells:
            if cell.ms_per_token_p95 > target_ms:
                break
            under = cell.concurrency
        return under

    @property
    def stopped_at_latency_knee(self) -> bool:
        return bool(self.targets_ms) and self.latency_knee(max(self.targets_ms)) is not None

    def cell(self, concurrency: int) -> CellResult | None:
        return next((c for c in self.cells if c.concurrency == concurrency), None)


def row_should_stop(cells: Sequence[CellResult], targets: LatencyTargets) -> bool:
    """A row stops at its first latency knee (the loosest target passed), or once chats wait for KV space:
    beyond that, more chats only queue (their TTFT grows, their ms/token does not)."""
    if not cells:
        return False
    limits = targets.for_row(cells[0].ms_per_token_p95)
    return (bool(limits) and cells[-1].ms_per_token_p95 > max(limits)) or cells[-1].waited_for_kv


def build_row(context_tokens: int, cells: Sequence[CellResult], targets: LatencyTargets,
              predicted: int | None) -> RowResult:
    limits = targets.for_row(cells[0].ms_per_token_p95) if cells else ()
    return RowResult(context_tokens, tuple(cells), limits, predicted)


@dataclass(frozen=True)
class DtypeSweep:
    kv_cache_dtype: str
    supported: bool
    reason: str | None = None
    kv_capacity_tokens: int = 0
    predicted_capacity_tokens: int | None = None
    block_size: int = 0
    load_seconds: float = 0.0
    rows: tuple[RowResult, ...] = field(default_factory=tuple)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _tokens_label(tokens: int) -> str:
    return f"{tokens / 1024:g}k" if tokens % 256 == 0 and tokens >= 1024 else f"{tokens:,}"


def sentence(sweep: DtypeSweep, target_label: str) -> str:
    """One line for the longest context measured, e.g. "fp8_e4m3: 4 chats of 8k stay under …; a 5th …"."""
    if not sweep.supported:
        return f"{sweep.kv_cache_dtype}: not run here ({sweep.reason})"
    rows = [r for r in sweep.rows if r.cells]
    if not rows:
        return f"{sweep.kv_cache_dtype}: nothing was measured"
    row = rows[-1]
    target = min(row.targets_ms)
    under = row.most_under(target)
    size = _tokens_label(row.context_tokens)
    predicted = "" if row.predicted_kv_knee is None else \
        f" (the planner predicted the KV knee at {row.predicted_kv_knee})"
    chats = f"{under} chats of {size} stay" if under != 1 else f"1 chat of {size} stays"
    head = f"{sweep.kv_cache_dtype}: {chats} under {target_label} ({target:.0f} ms/token p95)"
    nxt = next((c for c in row.cells if c.concurrency > under), None)
    knee = row.kv_knee
    if nxt is None:
        knee_cell = None if knee is None else row.cell(knee)
        if knee_cell is None:
            return f"{head}, as far as the sweep went{predicted}."
        cause = "preemption" if knee_cell.preemptions else (
            "a chat waited for KV space" if knee_cell.waited_for_kv else f"KV {knee_cell.peak_kv_usage:.0%} full")
        return f"{head}, as far as the sweep went; the KV knee is at {knee} ({cause}){predicted}."
    if nxt.preemptions:
        verb, noun = "triggers preemption", "preemption"
    elif nxt.peak_kv_usage >= KV_FULL:
        verb, noun = (f"fills the KV cache ({nxt.peak_kv_usage:.0%})",) * 2
    elif nxt.waited_for_kv:
        verb, noun = "waits for KV space", "chats waiting for KV space"
    else:
        verb, noun = "passes the target with KV to spare", "the target passed with KV to spare"
    slower = f" ({nxt.ms_per_token_p95:.0f} ms/token p95)"
    if nxt.concurrency == under + 1:
        tail = f"a {_ordinal(nxt.concurrency)} {verb}{slower}"
    else:
        tail = f"at {nxt.concurrency}: {noun}{slower}"
    if knee is not None and knee > nxt.concurrency:
        tail += f"; the KV knee is at {knee}"
    return f"{head}; {tail}{predicted}."


# ---- the JSON edge ---------------------------------------------------------------------------

def cell_to_dict(cell: CellResult) -> dict[str, Any]:
    return {"concurrency": cell.concurrency, "requests": cell.requests,
            "peak_kv_usage": round(cell.peak_kv_usage, 4), "preemptions": cell.preemptions,
            "waited": cell.waited, "waited_for_kv": cell.waited_for_kv, "kv_saturated": cell.kv_saturated,
            "ms_per_token_p50": round(cell.ms_per_token_p50, 2), "ms_per_token_p95": round(cell.ms_per_token_p95, 2),
            "ttft_p50_s": round(cell.ttft_p50_s, 4), "ttft_p95_s": round(cell.ttft_p95_s, 4),
            "seconds": round(cell.seconds, 2), "output_tok_s": round(cell.output_tok_s, 2)}


def row_to_dict(row: RowResult) -> dict[str, Any]:
    return {"context_tokens": row.context_tokens, "cells": [cell_to_dict(c) for c in row.cells],
            "kv_knee": row.kv_knee, "predicted_kv_knee": row.predicted_kv_knee,
            "targets_ms": [round(t, 2) for t in row.targets_ms],
            "latency_knees": [row.latency_knee(t) for t in row.targets_ms],
            "most_under_target": [row.most_under(t) for t in row.targets_ms],
            "stopped_at_latency_knee": row.stopped_at_latency_knee}


def sweep_to_dict(sweep: DtypeSweep, target_label: str) -> dict[str, Any]:
    return {"kv_cache_dtype": sweep.kv_cache_dtype, "supported": sweep.supported, "reason": sweep.reason,
            "kv_capacity_tokens": sweep.kv_capacity_tokens,
            "predicted_capacity_tokens": sweep.predicted_capacity_tokens,
            "block_size": sweep.block_size, "load_seconds": round(sweep.load_seconds, 1),
            "rows": [row_to_dict(r) for r in sweep.rows], "sentence": sentence(sweep, target_label)}


def sweep_from_dict(data: dict[str, Any]) -> DtypeSweep:
    """A sweep read back from its JSON (the dialog's side of the job line): the knees are derived again."""
    skip = {"kv_saturated"}
    rows = tuple(RowResult(row["context_tokens"],
                           tuple(CellResult(context_tokens=row["context_tokens"],
                                            **{k: v for k, v in cell.items() if k not in skip})
                                 for cell in row["cells"]),
                           tuple(row["targets_ms"]), row["predicted_kv_knee"]) for row in data.get("rows", []))
    return DtypeSweep(data["kv_cache_dtype"], data["supported"], data.get("reason"),
                      data.get("kv_capacity_tokens", 0), data.get("predicted_capacity_tokens"),
                      data.get("block_size", 0), data.get("load_seconds", 0.0), rows)


def series_to_dict(series: CellSeries) -> dict[str, Any]:
    return {"context_tokens": series.context_tokens, "concurrency": series.concurrency,
            "samples": [[round(s.t, 4), round(s.kv_usage, 4), s.running, s.waiting, s.preempted]
                        for s in series.samples],
            "requests": [{"sent": round(r.sent, 4), "measured": r.measured,
                          "deltas": [[round(t, 4), n] for t, n in r.deltas]} for r in series.requests]}


def series_from_dict(data: dict[str, Any]) -> CellSeries:
    return CellSeries(int(data["context_tokens"]), int(data["concurrency"]),
                      tuple(StatSample(float(t), float(u), int(r), int(w), int(p))
                            for t, u, r, w, p in data["samples"]),
                      tuple(RequestTiming(float(r["sent"]), tuple((float(t), int(n)) for t, n in r["deltas"]),
                                          bool(r["measured"])) for r in data["requests"]))


def headroom_text(report: dict[str, Any], kv_cache_dtype: str) -> str:
    """The KV gauge's tooltip: what the last saturation profile found for this dtype, row by row."""
    run = next((r for r in report.get("runs", []) if r.get("kv_cache_dtype") == kv_cache_dtype), None)
    when = report.get("when", "?")
    if run is None or not run.get("supported") or not run.get("rows"):
        return f"No saturation profile for KV {kv_cache_dtype} yet (Engine → Measure FP8… → Saturation)."
    lines = [f"Last saturation profile ({when}, KV {kv_cache_dtype}, pool {run['kv_capacity_tokens']:,} tokens):"]
    for row in run["rows"]:
        under = row["most_under_target"][0] if row["most_under_target"] else None
        knee = row["kv_knee"]
        lines.append(f"  {row['context_tokens']:,}-token chats: {under} under {row['targets_ms'][0]:.0f} ms/token; "
                     f"KV knee {'not reached' if knee is None else f'at {knee}'}"
                     f" (predicted {row['predicted_kv_knee']})")
    lines.append(run.get("sentence", ""))
    return "\n".join(line for line in lines if line)


def latest_profile_path() -> Path:
    return paths.data_dir() / "bench" / LATEST_PROFILE


def load_latest_profile() -> dict[str, Any] | None:
    """The last saturation report saved here, or None (none yet, or unreadable)."""
    try:
        data = json.loads(latest_profile_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
