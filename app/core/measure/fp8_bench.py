"""The FP8 KV benchmark's report and arithmetic, with no engine: bandwidth, the planner's floor, the depth
plan and prompts, the dtype comparison, and the rows both the terminal and the Measure dialog show.

The report is typed here; it becomes a dict only at the JSON / job-line edge (``to_dict``), and the
dialog reads it back with ``from_dict``. The engine runs are in app/commands/fp8_bench.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.core.measure.kv_quality import REASONING_PROMPTS  # the same prompts the quality check scores
from app.core.measure.tables import fmt, text_table
from app.core.models.planner import measure_host_bandwidth_gbps
from app.core.settings.settings import is_fp8

# Neutral prose that fills a prompt up to a context depth; the reasoning prompt goes last.
FILLER = ("The archive kept records of every harvest in the valley: the rainfall of each spring, the days "
          "the river rose, the prices at the autumn market, and the names of the families who worked the "
          "terraces on the northern slope. Clerks copied the ledgers twice, once for the town hall and once "
          "for the monastery, so that a fire in one place would not erase a century of careful counting. ")
DEFAULT_DEPTHS = (1024, 4096, 8192)
DEFAULT_KV_DTYPES = ("auto", "fp8_e4m3")
GB = 1e9


# ---- the report ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Bandwidth:
    gb_s: float | None  # None: a GPU the planner's table does not know
    source: str


@dataclass(frozen=True)
class Footprint:
    """Weight bytes and KV bytes per token per dtype; the floor needs both."""

    weight_bytes: int | None
    kv_bytes_per_token: dict[str, int]
    note: str | None


@dataclass(frozen=True)
class DepthFigures:
    """Decode at one context depth, against the planner's floor there."""

    depth: int
    ttft_s: float
    ms_per_token: float
    tok_s: float
    floor_ms_per_token: float | None
    measured_over_floor: float | None


@dataclass(frozen=True)
class DtypeRun:
    """One KV dtype: measured (one engine start), or not run, with the reason."""

    kv_cache_dtype: str
    supported: bool
    reason: str | None = None
    load_seconds: float = 0.0
    kv_capacity_tokens: int = 0
    max_concurrency: float = 0.0
    max_model_len: int = 0
    kv_bytes_per_token: int | None = None
    ttft_s: float = 0.0  # medians over the reasoning prompts
    ms_per_token: float = 0.0
    tok_s: float = 0.0
    depths: tuple[DepthFigures, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        if not self.supported:
            return {"kv_cache_dtype": self.kv_cache_dtype, "supported": False, "reason": self.reason, "depths": []}
        return {**asdict(self), "depths": [asdict(d) for d in self.depths]}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> DtypeRun:
        return DtypeRun(**{**data, "depths": tuple(DepthFigures(**d) for d in data.get("depths", []))})


@dataclass(frozen=True)
class Comparison:
    fp8: str
    capacity_ratio: float
    ms_per_token_ratio_by_depth: dict[str, float]


@dataclass(frozen=True)
class Fp8Report:
    model: str
    max_model_len: int
    tokens_per_measurement: int
    depths: tuple[int, ...]
    capped_depths: dict[str, int]  # asked → used (JSON keys are strings)
    capped_reason: str | None
    bandwidth: Bandwidth
    weight_bytes: int | None
    footprint_note: str | None
    runs: tuple[DtypeRun, ...]
    machine: dict[str, Any] = field(default_factory=dict)
    when: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S"))
    prompts: tuple[str, ...] = REASONING_PROMPTS
    json: str = ""  # where it was saved
    png: str = ""
    warm_up: str = ""  # the untimed request each engine start got before the first measurement

    @property
    def comparison(self) -> Comparison | None:
        return compare(self.runs)

    def to_dict(self) -> dict[str, Any]:
        comparison = self.comparison
        return {"benchmark": "fp8-kv", "when": self.when, "machine": self.machine, "model": self.model,
                "max_model_len": self.max_model_len, "tokens_per_measurement": self.tokens_per_measurement,
                "depths": list(self.depths), "capped_depths": dict(self.capped_depths),
                "capped_reason": self.capped_reason, "prompts": list(self.prompts),
                "bandwidth": asdict(self.bandwidth), "weight_bytes": self.weight_bytes,
                "footprint_note": self.footprint_note, "runs": [run.to_dict() for run in self.runs],
                "comparison": asdict(comparison) if comparison else {}, "json": self.json, "png": self.png,
                "warm_up": self.warm_up}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Fp8Report:
        return Fp8Report(
            model=data["model"], max_model_len=data["max_model_len"],
            tokens_per_measurement=data["tokens_per_measurement"], depths=tuple(data["depths"]),
            capped_depths=dict(data.get("capped_depths") or {}), capped_reason=data.get("capped_reason"),
            bandwidth=Bandwidth(**data["bandwidth"]), weight_bytes=data.get("weight_bytes"),
            footprint_note=data.get("footprint_note"), runs=tuple(DtypeRun.from_dict(r) for r in data["runs"]),
            machine=data.get("machine") or {}, when=data.get("when", ""),
            prompts=tuple(data.get("prompts") or ()), json=data.get("json", ""), png=data.get("png", ""),
            warm_up=data.get("warm_up", ""))


# ---- bandwidth and the planner's floor -----------------------------------------------------------

def bandwidth(probe: Any) -> Bandwidth:
    """GB/s the floor divides by: the GPU's spec sheet, or a measurement of host memory on the CPU."""
    from app.core.models.planner import bandwidth_for

    if probe.engine_kind == "cuda" and probe.gpus:
        name = probe.gpus[0].name
        gbps = bandwidth_for(name)
        if gbps is None:
            return Bandwidth(None, f"{name} is not in the planner's bandwidth table")
        return Bandwidth(gbps, f"spec sheet: {name}")
    return Bandwidth(round(measure_host_bandwidth_gbps(), 2),
                     "measured: host memory copy of 256 MiB (numpy, one thread)")


def model_footprint(model_dir: Path | None) -> Footprint:
    """Weight bytes and KV bytes per token per dtype, from config.json and safetensors headers."""
    from app.core.models.planner import (
        KV_ELEMENT_BYTES,
        PlannerError,
        attention_shape,
        load_model_config,
        read_safetensors_weight_bytes,
    )

    if model_dir is None:
        return Footprint(None, {}, "model is a hub id: its size is unknown here")
    try:
        shape = attention_shape(load_model_config(model_dir))
    except PlannerError as exc:
        return Footprint(None, {}, str(exc))
    return Footprint(read_safetensors_weight_bytes(model_dir),
                     {d: shape.kv_bytes_per_token(d) for d in KV_ELEMENT_BYTES}, shape.note)


def floor_ms(weight_bytes: int | None, kv_bytes_per_token: int | None, depth: int, gbps: float | None) -> float | None:
    """The planner's floor: every weight and the KV of ``depth`` tokens read once per decoded token."""
    if not weight_bytes or kv_bytes_per_token is None or not gbps:
        return None
    return (weight_bytes + kv_bytes_per_token * depth) / (gbps * GB) * 1000


# ---- the plan ----------------------------------------------------------------------------------

def plan_depths(requested: Sequence[int], max_model_len: int, tokens: int) -> tuple[list[int], dict[int, int]]:
    """Depths capped so ``tokens`` of output still fit in the context; and which were capped (asked → used)."""
    room = max(1, max_model_len - tokens - 1)
    capped = {d: room for d in requested if d > room}
    return sorted({min(d, room) for d in requested}), capped


def depth_prompt_ids(tokenizer: Any, depth: int, index: int) -> list[int]:
    """Exactly ``depth`` token ids: filler, then one of the reasoning prompts."""
    question = list(tokenizer.encode("\n\n" + REASONING_PROMPTS[index % len(REASONING_PROMPTS)],
                                     add_special_tokens=False))
    filler_ids = list(tokenizer.encode(FILLER, add_special_tokens=False))
    need = max(0, depth - len(question))
    body = (filler_ids * (need // max(1, len(filler_ids)) + 1))[:need]
    return (body + question)[-depth:]


def depth_figures(depth: int, ttft_s: float, ms_per_token: float, floor: float | None) -> DepthFigures:
    """One depth's figures, rounded as reported."""
    return DepthFigures(depth, round(ttft_s, 4), round(ms_per_token, 3), round(1000 / ms_per_token, 2),
                        None if floor is None else round(floor, 4),
                        None if floor is None else round(ms_per_token / floor, 2))


def compare(runs: Sequence[DtypeRun]) -> Comparison | None:
    """fp8 against auto, where both were measured: capacity, and ms/token depth by depth."""
    measured = {r.kv_cache_dtype: r for r in runs if r.supported}
    fp8 = next((r for d, r in measured.items() if is_fp8(d)), None)
    base = measured.get("auto")
    if not fp8 or not base or not base.kv_capacity_tokens:
        return None
    base_ms = {row.depth: row.ms_per_token for row in base.depths}
    return Comparison(fp8.kv_cache_dtype, round(fp8.kv_capacity_tokens / base.kv_capacity_tokens, 3),
                      {str(row.depth): round(row.ms_per_token / base_ms[row.depth], 3)
                       for row in fp8.depths if row.depth in base_ms})


# ---- what the terminal and the dialog show --------------------------------------------------------

HEADERS = ["KV dtype", "context", "TTFT ms", "ms/token", "tok/s", "floor ms/token", "measured ÷ floor"]


def table_rows(report: Fp8Report) -> list[list[str]]:
    """Per dtype: the reasoning prompts' medians, then each context depth against its floor."""
    rows: list[list[str]] = []
    for run in report.runs:
        dtype = run.kv_cache_dtype
        if not run.supported:
            rows.append([dtype, "not run", run.reason or "", "", "", "", ""])
            continue
        rows.append([dtype, "reasoning prompts", fmt(run.ttft_s, ".0f", 1000), fmt(run.ms_per_token, ".2f"),
                     fmt(run.tok_s, ".1f"), "", ""])
        for row in run.depths:
            rows.append([dtype, f"{row.depth:,}", fmt(row.ttft_s, ".0f", 1000), fmt(row.ms_per_token, ".2f"),
                         fmt(row.tok_s, ".1f"), fmt(row.floor_ms_per_token, ".2f"),
                         "–" if row.measured_over_floor is None else f"{row.measured_over_floor:.1f}×"])
    return rows


def summary_lines(report: Fp8Report) -> list[str]:
    lines = [f"Model: {report.model} · max_model_len {report.max_model_len:,} · {report.tokens_per_measurement} "
             f"decode tokens per measurement · bandwidth {report.bandwidth.gb_s} GB/s ({report.bandwidth.source})"]
    for run in report.runs:
        if not run.supported:
            lines.append(f"{run.kv_cache_dtype}: not run on this machine: {run.reason}")
        else:
            lines.append(f"{run.kv_cache_dtype}: KV capacity {run.kv_capacity_tokens:,} tokens, max concurrency "
                         f"{run.max_concurrency}× at {run.max_model_len:,} tokens, loaded in {run.load_seconds} s")
    comparison = report.comparison
    if comparison:
        lines.append(f"{comparison.fp8} holds {comparison.capacity_ratio}× the tokens of auto; ms/token ratio "
                     f"by depth {comparison.ms_per_token_ratio_by_depth}.")
    for asked, used in report.capped_depths.items():
        lines.append(f"Depth {int(asked):,} was capped to {used:,}: {report.capped_reason}.")
    return lines


def format_report(report: Fp8Report) -> str:
    """The terminal's text: the same summary and rows as the dialog."""
    return "\n".join([*summary_lines(report), "", text_table(HEADERS, table_rows(report)), "",
                      f"saved: {report.json}", f"plot:  {report.png}"])
