"""`nalar bench`: is an FP8 KV cache worth it for the configured model on this machine?

Each KV dtype gets one engine start (prefix caching off, so every prompt is really prefilled),
the fixed reasoning prompts for time to first token, then one prompt per context depth for
decode ms/token. The planner's bandwidth floor (weights + KV at that depth, read once per
token) sets each figure in proportion. Results are saved as JSON plus a PNG plot in the data
dir's bench/ folder. SIGTERM/SIGINT end the run with the engine closed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from app.core import paths
from app.core.job_lines import JobLineWriter
from app.core.kv_quality import REASONING_PROMPTS  # the same prompts the quality check scores
from app.core.settings import EngineConfig, changed, load_settings

# Neutral prose that fills a prompt up to a context depth; the reasoning prompt goes last.
FILLER = ("The archive kept records of every harvest in the valley: the rainfall of each spring, the days "
          "the river rose, the prices at the autumn market, and the names of the families who worked the "
          "terraces on the northern slope. Clerks copied the ledgers twice, once for the town hall and once "
          "for the monastery, so that a fire in one place would not erase a century of careful counting. ")
DEFAULT_DEPTHS = (1024, 4096, 8192)
DEFAULT_KV_DTYPES = ("auto", "fp8_e4m3")
WARMUP_TOKENS = 8
GB = 1e9


class BenchCancelled(Exception):
    """SIGTERM or SIGINT arrived: stop measuring, close the engine, exit."""


@contextlib.contextmanager
def cancel_on_signals() -> Iterator[None]:
    """Turn SIGTERM/SIGINT into BenchCancelled in the main thread (waits on futures are interruptible)."""
    def raise_cancelled(signum: int, frame: Any) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):  # a second signal must not interrupt the clean-up
            signal.signal(sig, signal.SIG_IGN)
        raise BenchCancelled(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, raise_cancelled) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[TextIO]:
    """Library chatter (ours and the EngineCore's, which inherits fd 1) goes to stderr; the
    returned stream is the real stdout, kept for job lines and the final JSON."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    real = os.fdopen(os.dup(saved), "w", buffering=1, encoding="utf-8")
    try:
        yield real
    finally:
        sys.stdout.flush()
        real.flush()
        os.dup2(saved, 1)
        os.close(saved)
        real.close()


# ---- bandwidth and the planner's floor ---------------------------------------------------------

def measure_host_bandwidth_gbps(megabytes: int = 256, repeats: int = 5) -> float:
    """Host memory bandwidth from a large array copy (read + write counted), best of ``repeats``."""
    import numpy as np

    source = np.ones(megabytes * (1 << 20) // 8, dtype=np.float64)
    target = np.empty_like(source)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - started)
    return 2 * source.nbytes / best / GB


def bandwidth(probe: Any) -> dict[str, Any]:
    """GB/s the floor divides by: the GPU's spec sheet, or a measurement of host memory on the CPU."""
    from app.core.planner import bandwidth_for

    if probe.engine_kind == "cuda" and probe.gpus:
        name = probe.gpus[0].name
        gbps = bandwidth_for(name)
        if gbps is None:
            return {"gb_s": None, "source": f"{name} is not in the planner's bandwidth table"}
        return {"gb_s": gbps, "source": f"spec sheet: {name}"}
    gbps = measure_host_bandwidth_gbps()
    return {"gb_s": round(gbps, 2), "source": "measured: host memory copy of 256 MiB (numpy, one thread)"}


def model_footprint(model_dir: Path | None) -> dict[str, Any]:
    """Weight bytes and KV bytes per token per dtype, from config.json and safetensors headers."""
    from app.core.planner import (
        KV_ELEMENT_BYTES,
        PlannerError,
        attention_shape,
        load_model_config,
        read_safetensors_weight_bytes,
    )

    if model_dir is None:
        return {"weight_bytes": None, "kv_bytes_per_token": {}, "note": "model is a hub id: its size is unknown here"}
    try:
        shape = attention_shape(load_model_config(model_dir))
    except PlannerError as exc:
        return {"weight_bytes": None, "kv_bytes_per_token": {}, "note": str(exc)}
    return {"weight_bytes": read_safetensors_weight_bytes(model_dir),
            "kv_bytes_per_token": {d: shape.kv_bytes_per_token(d) for d in KV_ELEMENT_BYTES}, "note": shape.note}


def floor_ms(weight_bytes: int | None, kv_bytes_per_token: int | None, depth: int, gbps: float | None) -> float | None:
    """The planner's floor: every weight and the KV of ``depth`` tokens read once per decoded token."""
    if not weight_bytes or kv_bytes_per_token is None or not gbps:
        return None
    return (weight_bytes + kv_bytes_per_token * depth) / (gbps * GB) * 1000


# ---- measuring one engine --------------------------------------------------------------------

def depth_prompt_ids(tokenizer: Any, depth: int, index: int) -> list[int]:
    """Exactly ``depth`` token ids: filler, then one of the reasoning prompts."""
    question = list(tokenizer.encode("\n\n" + REASONING_PROMPTS[index % len(REASONING_PROMPTS)],
                                     add_special_tokens=False))
    filler_ids = list(tokenizer.encode(FILLER, add_special_tokens=False))
    need = max(0, depth - len(question))
    body = (filler_ids * (need // max(1, len(filler_ids)) + 1))[:need]
    return (body + question)[-depth:]


async def timed_generation(host: Any, prompt_ids: list[int], tokens: int, request_id: str) -> dict[str, float]:
    """TTFT and decode ms/token of one greedy request of ``tokens`` tokens (ignore_eos), straight on AsyncLLM."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True, output_kind=RequestOutputKind.DELTA)
    called = time.perf_counter()
    first: float | None = None
    last = called
    after_first = 0
    async for output in host._engine.generate(TokensPrompt(prompt_token_ids=prompt_ids), params, request_id):
        now = time.perf_counter()
        count = len(output.outputs[0].token_ids)
        if not count:
            continue
        if first is None:
            first = now
            after_first += count - 1
        else:
            after_first += count
        last = now
    if first is None or after_first <= 0:
        raise RuntimeError(f"the engine produced too few tokens for request {request_id}")
    ms = (last - first) * 1000 / after_first
    return {"ttft_s": first - called, "ms_per_token": ms, "tok_s": 1000 / ms}


def _chat_ids(host: Any, prompt: str) -> list[int]:
    text = host._tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                               tokenize=False)
    return list(host._tokenizer.encode(text, add_special_tokens=False))


class Progress:
    """Fractions over the whole run: one step per engine start and per measurement."""

    def __init__(self, writer: JobLineWriter, total_steps: int) -> None:
        self.writer, self.total, self.done = writer, max(1, total_steps), 0

    def step(self, message: str) -> None:
        self.writer.progress(round(self.done / self.total, 3), message)
        self.done += 1


def measure_dtype(config: EngineConfig, depths: Sequence[int], tokens: int, progress: Progress,
                  footprint: dict[str, Any], gbps: float | None) -> dict[str, Any]:
    """One engine start with ``config``; every figure for its KV dtype; the engine closed afterwards."""
    from app.engine.host import EngineHost

    dtype = config.kv_cache_dtype
    host = EngineHost()
    try:
        progress.step(f"{dtype}: starting the engine")
        ready = host.loop_thread.submit(host.start(config)).result(900)
        host.loop_thread.submit(timed_generation(host, _chat_ids(host, REASONING_PROMPTS[0]), WARMUP_TOKENS,
                                                 f"{dtype}-warmup")).result(900)
        short = []
        for index, prompt in enumerate(REASONING_PROMPTS):
            progress.step(f"{dtype}: reasoning prompt {index + 1}/{len(REASONING_PROMPTS)}")
            short.append(host.loop_thread.submit(
                timed_generation(host, _chat_ids(host, prompt), tokens, f"{dtype}-prompt-{index}")).result(900))
        rows = []
        kv_per_token = footprint["kv_bytes_per_token"].get(dtype)
        for index, depth in enumerate(depths):
            progress.step(f"{dtype}: context depth {depth:,}")
            figures = host.loop_thread.submit(timed_generation(
                host, depth_prompt_ids(host._tokenizer, depth, index), tokens, f"{dtype}-depth-{depth}")).result(900)
            floor = floor_ms(footprint["weight_bytes"], kv_per_token, depth, gbps)
            rows.append({"depth": depth, "ttft_s": round(figures["ttft_s"], 4),
                         "ms_per_token": round(figures["ms_per_token"], 3), "tok_s": round(figures["tok_s"], 2),
                         "floor_ms_per_token": None if floor is None else round(floor, 4),
                         "measured_over_floor": None if floor is None else round(figures["ms_per_token"] / floor, 2)})
        return {"kv_cache_dtype": dtype, "supported": True, "reason": None,
                "load_seconds": round(ready.load_seconds, 1), "kv_capacity_tokens": ready.kv_capacity_tokens,
                "max_concurrency": round(ready.max_concurrency, 2), "max_model_len": ready.max_model_len,
                "kv_bytes_per_token": kv_per_token,
                "ttft_s": round(statistics.median(r["ttft_s"] for r in short), 4),
                "ms_per_token": round(statistics.median(r["ms_per_token"] for r in short), 3),
                "tok_s": round(statistics.median(r["tok_s"] for r in short), 2),
                "depths": rows}
    finally:
        host.close()  # also during the load (a cancel): it ends the processes that load started


# ---- the whole run ---------------------------------------------------------------------------

def plan_depths(requested: Sequence[int], max_model_len: int, tokens: int) -> tuple[list[int], dict[int, int]]:
    """Depths capped so ``tokens`` of output still fit in the context; and which were capped (asked → used)."""
    room = max(1, max_model_len - tokens - 1)
    capped = {d: room for d in requested if d > room}
    return sorted({min(d, room) for d in requested}), capped


def render_plot(report: dict[str, Any], target: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.2), dpi=110)
    for run in report["runs"]:
        if not run["supported"] or not run["depths"]:
            continue
        depths = [row["depth"] for row in run["depths"]]
        line, = axis.plot(depths, [row["ms_per_token"] for row in run["depths"]], marker="o",
                          label=f"{run['kv_cache_dtype']} measured")
        floors = [row["floor_ms_per_token"] for row in run["depths"]]
        if all(f is not None for f in floors):
            axis.plot(depths, floors, linestyle="--", color=line.get_color(), label=f"{run['kv_cache_dtype']} floor")
    for run in report["runs"]:
        if not run["supported"]:
            axis.text(0.02, 0.02, f"{run['kv_cache_dtype']}: not run here", transform=axis.transAxes, fontsize=8)
    axis.set_xlabel("context depth (tokens)")
    axis.set_ylabel("decode ms/token")
    axis.set_title(f"{Path(report['model']).name}: KV cache dtype vs decode speed", fontsize=10)
    axis.grid(True, alpha=0.3)
    axis.set_ylim(bottom=0)
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(target)
    plt.close(figure)
    return target


def _compare(runs: list[dict[str, Any]]) -> dict[str, Any]:
    measured = {r["kv_cache_dtype"]: r for r in runs if r["supported"]}
    fp8 = next((r for d, r in measured.items() if d.startswith("fp8")), None)
    base = measured.get("auto")
    if not fp8 or not base or not base["kv_capacity_tokens"]:
        return {}
    base_ms = {row["depth"]: row["ms_per_token"] for row in base["depths"]}
    return {"fp8": fp8["kv_cache_dtype"],
            "capacity_ratio": round(fp8["kv_capacity_tokens"] / base["kv_capacity_tokens"], 3),
            "ms_per_token_ratio_by_depth": {str(row["depth"]): round(row["ms_per_token"] / base_ms[row["depth"]], 3)
                                            for row in fp8["depths"] if row["depth"] in base_ms}}


def run_fp8_bench(config: EngineConfig, *, depths: Sequence[int] = DEFAULT_DEPTHS, tokens: int = 64,
                  kv_dtypes: Sequence[str] = DEFAULT_KV_DTYPES, writer: JobLineWriter | None = None,
                  probe: Any = None) -> dict[str, Any]:
    """Measure each KV dtype in turn; save JSON and PNG; return the report (with their paths)."""
    from app.bench import machine_description
    from app.core.embedded_model import ensure_embedded_model
    from app.engine import capability
    from app.engine.errors import EngineFailure, FailureKind
    from app.engine.host import check_model_path

    writer = writer or JobLineWriter(False)
    probe = probe or capability.probe_hardware()
    model = config.model or str(ensure_embedded_model())
    model_dir = check_model_path(model)
    config = changed(config, model=model, enable_prefix_caching=False)
    kept, capped = plan_depths(depths, config.max_model_len, tokens)
    reasons = {d: capability.kv_dtype_unsupported_reason(d, probe) for d in kv_dtypes}
    runnable = [d for d in kv_dtypes if reasons[d] is None]
    progress = Progress(writer, 1 + len(runnable) * (1 + len(REASONING_PROMPTS) + len(kept)))
    progress.step("measuring memory bandwidth")
    band = bandwidth(probe)
    footprint = model_footprint(model_dir)
    runs = []
    for dtype in kv_dtypes:
        if reasons[dtype]:
            runs.append({"kv_cache_dtype": dtype, "supported": False, "reason": reasons[dtype], "depths": []})
            continue
        dtype_config = changed(config, kv_cache_dtype=dtype)
        try:
            runs.append(measure_dtype(dtype_config, kept, tokens, progress, footprint, band["gb_s"]))
        except EngineFailure as failure:  # e.g. auto runs out of memory where fp8 fits: keep the other rows
            if failure.kind is FailureKind.MODEL_NOT_FOUND:
                raise
            runs.append({"kv_cache_dtype": dtype, "supported": False, "reason": f"{failure.message} {failure.fix}",
                         "depths": []})
    report: dict[str, Any] = {
        "benchmark": "fp8-kv", "when": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine_description(),
        "model": model, "max_model_len": config.max_model_len, "tokens_per_measurement": tokens,
        "depths": kept, "capped_depths": {str(asked): used for asked, used in capped.items()},
        "capped_reason": (f"max_model_len {config.max_model_len} leaves room for {tokens} output tokens "
                          f"after at most {kept[-1]} prompt tokens" if capped else None),
        "prompts": list(REASONING_PROMPTS), "bandwidth": band, "weight_bytes": footprint["weight_bytes"],
        "footprint_note": footprint["note"], "runs": runs, "comparison": _compare(runs)}
    folder = paths.data_dir() / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"fp8-{time.strftime('%Y%m%d-%H%M%S')}"
    report["json"] = str(folder / f"{stem}.json")
    report["png"] = str(render_plot(report, folder / f"{stem}.png"))
    Path(report["json"]).write_text(json.dumps(report, indent=2), encoding="utf-8")
    writer.progress(1.0, "done")
    return report


def format_table(report: dict[str, Any]) -> str:
    band = report["bandwidth"]
    lines = [f"model: {report['model']}  (max_model_len {report['max_model_len']}, "
             f"{report['tokens_per_measurement']} decode tokens per measurement)",
             f"bandwidth: {band['gb_s']} GB/s ({band['source']})"]
    if report["capped_depths"]:
        lines.append(f"capped depths {report['capped_depths']}: {report['capped_reason']}")
    for run in report["runs"]:
        lines.append("")
        if not run["supported"]:
            lines.append(f"[{run['kv_cache_dtype']}] not run: {run['reason']}")
            continue
        lines.append(f"[{run['kv_cache_dtype']}] KV capacity {run['kv_capacity_tokens']:,} tokens, max concurrency "
                     f"{run['max_concurrency']}x, loaded in {run['load_seconds']} s; reasoning prompts: TTFT "
                     f"{run['ttft_s'] * 1000:.0f} ms, {run['ms_per_token']} ms/token, {run['tok_s']} tok/s")
        lines.append(f"  {'depth':>7} {'TTFT ms':>9} {'ms/token':>9} {'tok/s':>7} {'floor ms':>9} "
                     f"{'measured/floor':>15}")
        for row in run["depths"]:
            floor = "-" if row["floor_ms_per_token"] is None else f"{row['floor_ms_per_token']:.3f}"
            ratio = "-" if row["measured_over_floor"] is None else f"{row['measured_over_floor']:.1f}x"
            lines.append(f"  {row['depth']:>7,} {row['ttft_s'] * 1000:>9.0f} {row['ms_per_token']:>9.2f} "
                         f"{row['tok_s']:>7.2f} {floor:>9} {ratio:>15}")
    if report["comparison"]:
        comp = report["comparison"]
        lines.append("")
        lines.append(f"{comp['fp8']} vs auto: capacity x{comp['capacity_ratio']}; ms/token ratio by depth "
                     f"{comp['ms_per_token_ratio_by_depth']}")
    lines.append("")
    lines.append(f"saved: {report['json']}\nplot:  {report['png']}")
    return "\n".join(lines)


def run_fp8_bench_command(*, depths: Sequence[int], tokens: int, kv_dtypes: Sequence[str], as_json: bool,
                          progress_jsonl: bool, model: str | None = None, max_model_len: int | None = None) -> int:
    """The CLI entry: settings' engine config (plus overrides), signals handled, exit code 0/1."""
    from pydantic import ValidationError

    from app.engine.errors import EngineFailure

    with stdout_to_stderr() as out:
        writer = JobLineWriter(progress_jsonl, out)
        settings, _ = load_settings()
        try:
            update: dict[str, Any] = {}
            if model is not None:
                update["model"] = model
            if max_model_len is not None:
                update["max_model_len"] = max_model_len
            config = changed(settings.engine, **update)
            for dtype in kv_dtypes:
                EngineConfig(kv_cache_dtype=dtype)  # type: ignore[arg-type]
        except ValidationError as exc:
            writer.error(f"Invalid benchmark option: {exc.errors()[0]['msg']}",
                         "KV dtypes are auto, bfloat16, fp8_e4m3 or fp8_e5m2; max_model_len is 256 or more.")
            return 1
        try:
            with cancel_on_signals():
                report = run_fp8_bench(config, depths=depths, tokens=tokens, kv_dtypes=kv_dtypes, writer=writer)
        except BenchCancelled as cancelled:
            writer.error(f"The benchmark was cancelled ({cancelled}).", "Run it again to measure.")
            return 1
        except EngineFailure as failure:
            writer.error(failure.message, failure.fix)
            return 1
        except Exception as exc:  # a bug or an engine crash: say so in one line, the traceback goes to the log
            logging.getLogger(__name__).exception("the FP8 benchmark failed")
            writer.error(f"The benchmark failed: {exc}", f"See the logs in {paths.log_dir()}.")
            return 1
        writer.result(report)
        if as_json and not progress_jsonl:
            out.write(json.dumps(report, indent=2) + "\n")
        elif not progress_jsonl:
            out.write(format_table(report) + "\n")
    return 0
