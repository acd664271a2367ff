"""The saturation sweep's report: typed while the sweep runs, a dict only at the JSON / job-line edge, and
the one row builder that both `nalar bench saturation`'s terminal table and the dialog's Saturation tab show."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from app.core.measure.saturation import DtypeSweep, LatencyTargets, sweep_from_dict, sweep_to_dict
from app.core.measure.tables import text_table


@dataclass(frozen=True)
class SaturationReport:
    model: str
    device: str  # "gpu" or "cpu"
    max_model_len: int
    kv_pool_mib: int | None  # the CPU pool the sweep ran with (None on a GPU)
    prefix_caching: bool
    output_tokens: int
    rounds: int
    contexts: tuple[int, ...]
    concurrency: tuple[int, ...]
    dropped_contexts: tuple[int, ...]  # no room for the output in max_model_len
    targets: LatencyTargets
    sweeps: tuple[DtypeSweep, ...]
    machine: dict[str, Any] = field(default_factory=dict)
    when: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S"))
    json: str = ""  # where it was saved
    png: str = ""
    series: str | None = None  # the per-step series, with --keep-series
    warm_up: str = ""  # the untimed request each engine start got before the first cell

    @property
    def target_label(self) -> str:
        return self.targets.labels()[0]

    def sentences(self) -> list[str]:
        return [sweep_to_dict(s, self.target_label)["sentence"] for s in self.sweeps]

    def to_dict(self) -> dict[str, Any]:
        data = {"benchmark": "saturation", "when": self.when, "machine": self.machine, "model": self.model,
                "device": self.device, "max_model_len": self.max_model_len, "kv_pool_mib": self.kv_pool_mib,
                "prefix_caching": self.prefix_caching, "output_tokens": self.output_tokens, "rounds": self.rounds,
                "contexts": list(self.contexts), "concurrency": list(self.concurrency),
                "dropped_contexts": list(self.dropped_contexts),
                "targets": {"absolute_ms": list(self.targets.absolute_ms), "relative": list(self.targets.relative)},
                "target_label": self.target_label,
                "runs": [sweep_to_dict(s, self.target_label) for s in self.sweeps], "json": self.json,
                "png": self.png, "warm_up": self.warm_up}
        if self.series is not None:
            data["series"] = self.series
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> SaturationReport:
        targets = data.get("targets") or {}
        return SaturationReport(
            model=data["model"], device=data.get("device", "cpu"), max_model_len=data.get("max_model_len", 0),
            kv_pool_mib=data.get("kv_pool_mib"), prefix_caching=data.get("prefix_caching", False),
            output_tokens=data.get("output_tokens", 0), rounds=data.get("rounds", 0),
            contexts=tuple(data["contexts"]), concurrency=tuple(data["concurrency"]),
            dropped_contexts=tuple(data.get("dropped_contexts") or ()),
            targets=LatencyTargets(tuple(targets.get("absolute_ms", ())), tuple(targets.get("relative", ()))),
            sweeps=tuple(sweep_from_dict(run) for run in data["runs"]), machine=data.get("machine") or {},
            when=data.get("when", ""), json=data.get("json", ""), png=data.get("png", ""), series=data.get("series"),
            warm_up=data.get("warm_up", ""))


HEADERS = ["KV dtype", "context", "chats", "peak KV", "preemptions", "waited", "p50 ms/token", "p95 ms/token",
           "TTFT p50", "knee"]


def table_rows(report: SaturationReport) -> list[list[str]]:
    """One row per measured cell; the knee column marks the KV knee (measured and predicted) and the first
    latency knee."""
    rows: list[list[str]] = []
    for sweep in report.sweeps:
        dtype = sweep.kv_cache_dtype
        if not sweep.supported:
            rows.append([dtype, "not run", sweep.reason or "", "", "", "", "", "", "", ""])
            continue
        for row in sweep.rows:
            latency = row.latency_knee(row.targets_ms[0]) if row.targets_ms else None
            for cell in row.cells:
                marks = []
                if cell.concurrency == row.kv_knee:
                    marks.append("KV")
                if cell.concurrency == row.predicted_kv_knee:
                    marks.append("KV (predicted)")
                if cell.concurrency == latency:
                    marks.append("latency")
                rows.append([dtype, f"{row.context_tokens:,}", str(cell.concurrency), f"{cell.peak_kv_usage:.0%}",
                             str(cell.preemptions), "yes" if cell.waited else "no", f"{cell.ms_per_token_p50:.1f}",
                             f"{cell.ms_per_token_p95:.1f}", f"{cell.ttft_p50_s * 1000:.0f} ms", ", ".join(marks)])
    return rows


def format_report(report: SaturationReport) -> str:
    """The terminal's text: the run, each dtype's capacity and sentence, and the dialog's rows."""
    lines = [f"model: {report.model} ({report.device}, max_model_len {report.max_model_len}, "
             f"KV pool {report.kv_pool_mib} MiB, {report.output_tokens} output tokens, "
             f"{report.rounds} rounds per client)", f"target: p95 under {report.target_label}"]
    for sweep, sentence in zip(report.sweeps, report.sentences()):
        if sweep.supported:
            lines.append(f"[{sweep.kv_cache_dtype}] KV capacity {sweep.kv_capacity_tokens:,} tokens "
                         f"(planner: {sweep.predicted_capacity_tokens}), loaded in {sweep.load_seconds:.1f} s")
        lines.append(f"  {sentence}")
    lines += ["", text_table(HEADERS, table_rows(report)), "", f"saved: {report.json}", f"heatmap: {report.png}"]
    return "\n".join(lines)
