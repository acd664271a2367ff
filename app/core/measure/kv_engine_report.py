"""FP8 truth on the real engine: what `nalar kv-check --engine` reports, and its arithmetic.

The emulated check (app/core/measure/kv_quality.py) rounds K and V in transformers. This one runs the fixed reasoning
prompts on vLLM itself, once per KV dtype, greedy and at temperature 0.6 with fixed seeds, and reports per dtype
how many streams the loop guard would stop, and for fp8 against auto how many leading tokens agree.
Typed here, a dict only at the JSON edge; the engine runs are in app/commands/kv_engine_check.py.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from app.core.measure.kv_quality import REASONING_PROMPTS
from app.core.measure.tables import fmt, text_table
from app.core.settings.settings import is_fp8

# One-line word problems: the embedded model loops on these under greedy decoding (tests/support/golden_capture.py
# records its streams on them).
LOOPING_WORD_PROBLEMS = (
    "A shop sells pens at 3 dollars each. Tom buys 7 pens and pays with a 50 dollar note. How much change?",
    "Sara has 12 apples, gives 5 to Ben and buys 9 more. How many apples does she have?",
    "A train travels 60 km per hour for 3 hours and then 40 km per hour for 2 hours. How far does it go?",
    "If 4 workers build a wall in 6 days, how many days do 8 workers need?",
    "A box holds 24 eggs. How many boxes are needed for 150 eggs?",
    "Mia reads 15 pages a day. How many days does she need for a 240-page book?",
    "A rectangle is 8 cm long and 5 cm wide. What is its area and its perimeter?",
    "John is 3 times as old as his son. In 12 years he will be twice as old. How old is the son?",
    "A farmer has chickens and cows, 30 heads and 74 legs in all. How many cows?",
    "A car uses 6 liters of fuel per 100 km. How much fuel for 350 km?",
    "What is 17 times 23, then minus 45?",
    "A recipe needs 3 eggs for 4 people. How many eggs for 10 people?",
    "Anna saves 25 dollars a week. How many weeks until she has 400 dollars?",
    "A tank fills at 12 liters a minute and drains at 4 liters a minute. How long to fill 200 liters?",
    "Three friends share a 45 dollar bill and a 9 dollar tip equally. How much does each pay?",
    "A bus has 40 seats. 27 people get on, then 9 get off and 15 get on. How many empty seats?",
    "What is the sum of the first 20 odd numbers?",
    "A shirt costs 40 dollars and is discounted by 15 percent. What is the new price?",
    "Tim runs 5 km every day except Sunday. How far does he run in 4 weeks?",
    "A pizza is cut into 8 slices. 3 people eat 2 slices each. What fraction is left?",
)
# kv-check --engine runs the quality check's reasoning prompts and five of these: a loop rate that can move.
WORD_PROBLEMS = tuple(LOOPING_WORD_PROBLEMS[i] for i in (0, 3, 7, 8, 18))
ENGINE_PROMPTS = REASONING_PROMPTS + WORD_PROBLEMS


@dataclass(frozen=True)
class Sampling:
    """Greedy (temperature 0), or a temperature with a fixed per-request seed."""

    temperature: float
    seed: int | None = None

    @property
    def label(self) -> str:
        return "greedy" if self.temperature == 0 else f"t={self.temperature:g} seed {self.seed}"


@dataclass(frozen=True)
class EngineStream:
    """One request's output and where the loop guard, watching it as the app does, would have fired."""

    prompt_index: int
    sampling: Sampling
    token_ids: tuple[int, ...]
    finish_reason: str | None
    loop_phase: str | None = None  # "thinking" or "answer"; None: no loop
    loop_start_token: int = 0  # counted from the phase's first token
    loop_period: int = 0

    @property
    def looped(self) -> bool:
        return self.loop_phase is not None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "token_ids": list(self.token_ids)}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> EngineStream:
        return EngineStream(**{**data, "sampling": Sampling(**data["sampling"]),
                               "token_ids": tuple(data["token_ids"])})


@dataclass(frozen=True)
class EngineDtypeRun:
    """One KV dtype in one engine start, or not run, with the reason (the capability's words)."""

    kv_cache_dtype: str
    supported: bool
    reason: str | None = None
    streams: tuple[EngineStream, ...] = ()
    seconds: float = 0.0

    @property
    def tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.streams)

    @property
    def loops(self) -> int:
        return sum(s.looped for s in self.streams)

    @property
    def loop_rate(self) -> float | None:
        return self.loops / len(self.streams) if self.streams else None

    def to_dict(self) -> dict[str, Any]:
        return {"kv_cache_dtype": self.kv_cache_dtype, "supported": self.supported, "reason": self.reason,
                "seconds": round(self.seconds, 1), "tokens": self.tokens, "loops": self.loops,
                "loop_rate": self.loop_rate, "streams": [s.to_dict() for s in self.streams]}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> EngineDtypeRun:
        return EngineDtypeRun(data["kv_cache_dtype"], data["supported"], data.get("reason"),
                              tuple(EngineStream.from_dict(s) for s in data.get("streams", [])),
                              float(data.get("seconds") or 0.0))


def leading_agreement(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens the two outputs share before they first differ."""
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        count += 1
    return count


@dataclass(frozen=True)
class Agreement:
    """fp8 against auto on one prompt and sampling: leading tokens in common, of the shorter output."""

    prompt_index: int
    sampling: Sampling
    leading_tokens: int
    of_tokens: int


def agreements(base: EngineDtypeRun, other: EngineDtypeRun) -> list[Agreement]:
    """Pairs the two runs' streams by prompt and sampling (both ran the same plan)."""
    theirs = {(s.prompt_index, s.sampling): s for s in other.streams}
    found = []
    for stream in base.streams:
        twin = theirs.get((stream.prompt_index, stream.sampling))
        if twin is not None:
            found.append(Agreement(stream.prompt_index, stream.sampling,
                                   leading_agreement(stream.token_ids, twin.token_ids),
                                   min(len(stream.token_ids), len(twin.token_ids))))
    return found


@dataclass(frozen=True)
class EngineCheck:
    """The real-engine runs, and fp8 against auto where both ran."""

    model: str
    prompts: tuple[str, ...]
    samplings: tuple[Sampling, ...]
    max_tokens: int
    guard_from_token: int  # the loop guard's start_after_tokens the streams were watched with
    runs: tuple[EngineDtypeRun, ...]
    machine: dict[str, Any] = field(default_factory=dict)
    saved: str = ""

    def run(self, kv_dtype: str) -> EngineDtypeRun | None:
        return next((r for r in self.runs if r.kv_cache_dtype == kv_dtype), None)

    def agreements(self, fp8: str = "fp8_e4m3") -> list[Agreement]:
        base, other = self.run("auto"), self.run(fp8)
        if base is None or other is None or not base.supported or not other.supported:
            return []
        return agreements(base, other)

    def median_agreement(self, fp8: str = "fp8_e4m3") -> float | None:
        found = self.agreements(fp8)
        return statistics.median(a.leading_tokens for a in found) if found else None

    def to_dict(self) -> dict[str, Any]:
        data = {"check": "kv-engine", "model": self.model, "prompts": list(self.prompts),
                "samplings": [asdict(s) for s in self.samplings], "max_tokens": self.max_tokens,
                "guard_from_token": self.guard_from_token, "machine": self.machine,
                "runs": [r.to_dict() for r in self.runs],
                "agreement": [asdict(a) for a in self.agreements()], "median_agreement": self.median_agreement()}
        return {**data, "saved": self.saved} if self.saved else data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> EngineCheck:
        return EngineCheck(data["model"], tuple(data["prompts"]), tuple(Sampling(**s) for s in data["samplings"]),
                           data["max_tokens"], data["guard_from_token"],
                           tuple(EngineDtypeRun.from_dict(r) for r in data["runs"]), data.get("machine") or {},
                           data.get("saved", ""))


HEADERS = ["KV cache", "streams", "tokens", "loops", "loop rate", "leading tokens = auto (median)"]


def table_rows(check: EngineCheck) -> list[list[str]]:
    """Per KV dtype: streams, tokens, loops; fp8 rows add the median leading agreement with auto."""
    rows = []
    for run in check.runs:
        if not run.supported:
            rows.append([run.kv_cache_dtype, "not run", run.reason or "", "", "", ""])
            continue
        median = check.median_agreement(run.kv_cache_dtype) if is_fp8(run.kv_cache_dtype) else None
        rows.append([run.kv_cache_dtype, str(len(run.streams)), f"{run.tokens:,}", str(run.loops),
                     fmt(run.loop_rate, ".0%"), "–" if median is None else f"{median:g}"])
    return rows


AGREEMENT_HEADERS = ["prompt", "sampling", "leading tokens = auto", "of"]


def agreement_rows(check: EngineCheck) -> list[list[str]]:
    return [[str(a.prompt_index + 1), a.sampling.label, str(a.leading_tokens), str(a.of_tokens)]
            for a in check.agreements()]


def format_engine_check(check: EngineCheck) -> str:
    lines = [f"On the real engine: {check.model}",
             f"{len(check.prompts)} prompts × {', '.join(s.label for s in check.samplings)}, up to {check.max_tokens} "
             f"tokens each; loop guard from token {check.guard_from_token}",
             text_table(HEADERS, table_rows(check))]
    if check.agreements():
        lines += ["fp8_e4m3 against auto:", text_table(AGREEMENT_HEADERS, agreement_rows(check))]
    return "\n".join(lines)
