"""`nalar bench saturation`: how many concurrent chats of what length fit before tokens slow down.

For each KV dtype the machine runs: one engine start, then context length × concurrency cells.
Each cell is a closed loop: every client sends its next request when its last one ends (the first
requests are shortened so the clients run out of phase, as real chats do); prompts have unique
prefixes (no shared KV), outputs a fixed token count (ignore_eos). The stat logger's per-step series
gives peak KV use, preemptions and queueing; token arrival times give ms/token and TTFT. A row stops
at its first latency knee, or once chats wait for KV space (more would only queue). The planner
predicts each row's KV knee before the engine starts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.commands.jobs import Job, JobContext, JobFailed, machine_description, report_stem, run_job, save_json, sibling
from app.core.measure.fp8_bench import depth_prompt_ids
from app.core.measure.job_lines import JobLineWriter
from app.core.measure.plots import render_heatmap
from app.core.measure.saturation import (
    CellResult,
    CellSeries,
    DtypeSweep,
    LatencyTargets,
    RequestTiming,
    RowResult,
    StatSample,
    build_row,
    latest_profile_path,
    predicted_kv_knee,
    row_should_stop,
    series_to_dict,
    summarise_cell,
    usable_blocks,
)
from app.core.measure.saturation_report import SaturationReport, format_report
from app.core.settings.settings import EngineConfig, load_settings

# Each engine start gets one untimed request before the first cell, so the first row does not pay for it.
WARMUP_PROMPT_TOKENS, WARMUP_TOKENS = 64, 8
WARM_UP = (f"one untimed {WARMUP_TOKENS}-token request ({WARMUP_PROMPT_TOKENS}-token prompt) after each engine "
           "start, before the first cell")


@dataclass(frozen=True)
class SweepPlan:
    """What to sweep.

    The CPU default fills an 8 MiB pool of 32-token blocks at 2-4 chats of 64-160 tokens. Prefill dominates
    a CPU sweep (an AVX2 EPYC prefills 35 tokens/s), so the chats are short and the blocks small: the same
    KV knees as 256-640-token chats in 128-token blocks, at a quarter of the prefill.
    """

    contexts: tuple[int, ...]
    concurrency: tuple[int, ...]
    output_tokens: int
    rounds: int
    max_model_len: int
    cpu_kv_pool_mib: int
    targets: LatencyTargets
    kv_block_size: int | None = None  # None: vLLM's default for the device

    @staticmethod
    def default(on_gpu: bool) -> SweepPlan:
        if on_gpu:
            return SweepPlan((2048, 8192, 32768), (1, 2, 4, 8, 16, 32, 64), 1024, 2, 40960, 0,
                             LatencyTargets.default(True))
        return SweepPlan((64, 128, 160), (1, 2, 3, 4, 6), 32, 2, 256, 8, LatencyTargets.default(False), 32)


# ---- one engine's sweep ------------------------------------------------------------------------

def unique_prompt_ids(tokenizer: Any, context_tokens: int, tag: str, index: int) -> list[int]:
    """Exactly ``context_tokens`` ids that share no KV block with any other prompt: a unique first line."""
    head = list(tokenizer.encode(f"Conversation {tag}.\n", add_special_tokens=False))
    return head + depth_prompt_ids(tokenizer, max(1, context_tokens - len(head)), index)


async def _stream(host: Any, ids: list[int], tokens: int, request_id: str, measured: bool) -> RequestTiming:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True, output_kind=RequestOutputKind.DELTA)
    sent = time.perf_counter()
    deltas: list[tuple[float, int]] = []
    # Straight on AsyncLLM, as the FP8 bench does: the engine is measured, not Nalar's reply layer.
    async for output in host.raw_generate(ids, params, request_id):
        count = len(output.outputs[0].token_ids)
        if count:
            deltas.append((time.perf_counter(), count))
    return RequestTiming(sent, tuple(deltas), measured)


async def run_cell(host: Any, context_tokens: int, concurrency: int, plan: SweepPlan, tag: str) -> CellSeries:
    """``concurrency`` clients in a closed loop of ``plan.rounds`` requests each, recorded step by step."""
    samples: list[StatSample] = []

    def record(stats: Any) -> None:
        samples.append(StatSample(time.perf_counter(), stats.usage, stats.running, stats.waiting, stats.preempted))

    async def client(index: int) -> list[RequestTiming]:
        timings = []
        for round_ in range(plan.rounds):
            # The first round is shortened by client so that later rounds start at different times.
            staggered = round_ == 0 and index < concurrency - 1 and plan.rounds > 1
            tokens = max(2, plan.output_tokens * (index + 1) // concurrency) if staggered else plan.output_tokens
            name = f"{tag}-{context_tokens}x{concurrency}-{index}-{round_}"
            ids = unique_prompt_ids(host.tokenizer, context_tokens, name, index + round_)
            timings.append(await _stream(host, ids, tokens, name, measured=not staggered))
        return timings

    record(host.kv)
    host.kv.on_record = record
    try:
        per_client = await asyncio.gather(*(client(i) for i in range(concurrency)))
    finally:
        host.kv.on_record = None
    record(host.kv)
    return CellSeries(context_tokens, concurrency, tuple(samples), tuple(t for ts in per_client for t in ts))


def sweep_dtype(config: EngineConfig, plan: SweepPlan, predicted_capacity: int | None, block_size: int,
                on_cell: Any, keep_series: list[dict[str, Any]] | None) -> DtypeSweep:
    """One engine start; every row of the plan (each stops at its latency knee); the engine closed after."""
    from app.engine.local.host import EngineHost

    dtype = config.kv_cache_dtype
    host = EngineHost()
    try:
        on_cell(f"{dtype}: starting the engine", 0, 0)
        ready = host.loop_thread.submit(host.start(config, kv_block_size=plan.kv_block_size)).result(900)
        warm = unique_prompt_ids(host.tokenizer, WARMUP_PROMPT_TOKENS, f"{dtype}-warmup", 0)
        host.loop_thread.submit(_stream(host, warm, WARMUP_TOKENS, f"{dtype}-warmup", True)).result(900)
        capacity = ready.kv_capacity_tokens
        total_blocks = usable_blocks(capacity, block_size)
        rows: list[RowResult] = []
        for row_index, context in enumerate(plan.contexts):
            cells: list[CellResult] = []
            for concurrency in plan.concurrency:
                on_cell(f"{dtype}: {context:,}-token chats × {concurrency}", row_index, concurrency)
                running = host.loop_thread.submit(run_cell(host, context, concurrency, plan, dtype))
                try:
                    series = running.result(3600)
                except BaseException:  # a cancel (SIGTERM): stop the cell's requests before the engine closes
                    running.cancel()
                    raise
                if keep_series is not None:
                    keep_series.append({"kv_cache_dtype": dtype, "total_blocks": total_blocks,
                                        "block_size": block_size, **series_to_dict(series)})
                cells.append(summarise_cell(series, total_blocks=total_blocks, block_size=block_size))
                if row_should_stop(cells, plan.targets):
                    break
            rows.append(build_row(context, cells, plan.targets,
                                  predicted_kv_knee(predicted_capacity or capacity, block_size, context,
                                                    plan.output_tokens)))
        return DtypeSweep(dtype, True, None, capacity, predicted_capacity, block_size, ready.load_seconds, tuple(rows))
    finally:
        host.close()  # also during the load (a cancel): it ends the processes that load started


# ---- the whole run ---------------------------------------------------------------------------

def _planned_capacity(model_dir: Path | None, config: EngineConfig, dtype: str, on_gpu: bool,
                      probe: Any, block_size: int | None) -> tuple[int | None, int]:
    """The planner's capacity for ``dtype`` (None for a hub id) and the block size it assumes."""
    from app.core.models.planner import BLOCK_SIZE_CPU, BLOCK_SIZE_GPU, PlannerError, plan_for_folder

    block = block_size or (BLOCK_SIZE_GPU if on_gpu else BLOCK_SIZE_CPU)
    if model_dir is None:
        return None, block
    try:
        if on_gpu:
            planned = plan_for_folder(model_dir, max_model_len=config.max_model_len, kv_dtypes=(dtype,),
                                      vram_total_bytes=probe.gpus[0].vram_total_bytes, block_size=block,
                                      gpu_memory_utilization=config.gpu_memory_utilization)
        else:
            planned = plan_for_folder(model_dir, max_model_len=config.max_model_len, kv_dtypes=(dtype,),
                                      cpu_kv_pool_bytes=int(config.cpu_kv_cache_gib * (1 << 30)),
                                      block_size=block)
    except PlannerError:
        return None, block
    return planned.row(dtype).capacity_tokens, block


def run_saturation(config: EngineConfig, plan: SweepPlan, *, kv_dtypes: Sequence[str] = ("auto", "fp8_e4m3"),
                   writer: JobLineWriter | None = None, probe: Any = None,
                   keep_series: bool = False) -> SaturationReport:
    """Sweep each KV dtype the machine runs; save JSON and the heatmap PNG; return the report."""
    from app.core.models.embedded_model import ensure_embedded_model
    from app.engine.errors import EngineFailure, FailureKind
    from app.engine.local.host import check_model_path
    from app.engine.machine import capability

    writer = writer or JobLineWriter(False)
    probe = probe or capability.probe_hardware()
    on_gpu = probe.engine_kind == "cuda"
    model = config.model or str(ensure_embedded_model())
    model_dir = check_model_path(model)
    update: dict[str, Any] = {"model": model, "max_model_len": plan.max_model_len}
    if not on_gpu:
        update["cpu_kv_cache_gib"] = plan.cpu_kv_pool_mib / 1024
    config = EngineConfig.model_validate({**config.model_dump(), **update})
    contexts = [c for c in plan.contexts if c + plan.output_tokens <= plan.max_model_len]
    dropped = [c for c in plan.contexts if c not in contexts]
    plan = dataclasses.replace(plan, contexts=tuple(contexts))
    reasons = {d: capability.kv_dtype_unsupported_reason(d, probe) for d in kv_dtypes}
    runnable = [d for d in kv_dtypes if reasons[d] is None]
    series: list[dict[str, Any]] | None = [] if keep_series else None
    sweeps: list[DtypeSweep] = []
    for dtype in kv_dtypes:
        if reasons[dtype]:
            sweeps.append(DtypeSweep(dtype, False, reasons[dtype]))
            continue
        done = len([s for s in sweeps if s.supported])

        def on_cell(message: str, row: int, concurrency: int, done: int = done) -> None:
            within = (row + concurrency / max(plan.concurrency)) / max(1, len(plan.contexts))
            writer.progress(round(min(0.99, (done + within) / len(runnable)), 3), message)

        predicted, block = _planned_capacity(model_dir, config, dtype, on_gpu, probe, plan.kv_block_size)
        dtype_config = EngineConfig.model_validate({**config.model_dump(), "kv_cache_dtype": dtype})
        try:
            sweeps.append(sweep_dtype(dtype_config, plan, predicted, block, on_cell, series))
        except EngineFailure as failure:  # e.g. the pool is too small for auto: keep the other dtype
            if failure.kind is FailureKind.MODEL_NOT_FOUND:
                raise
            sweeps.append(DtypeSweep(dtype, False, f"{failure.message} {failure.fix}"))
    stem = report_stem("bench", "saturation")
    report = SaturationReport(
        model=model, device="gpu" if on_gpu else "cpu", max_model_len=plan.max_model_len,
        kv_pool_mib=None if on_gpu else plan.cpu_kv_pool_mib, prefix_caching=config.enable_prefix_caching,
        output_tokens=plan.output_tokens, rounds=plan.rounds, contexts=plan.contexts,
        concurrency=plan.concurrency, dropped_contexts=tuple(dropped), targets=plan.targets, sweeps=tuple(sweeps),
        machine=machine_description(), json=str(sibling(stem, ".json")), png=str(sibling(stem, ".png")),
        series=None if series is None else str(sibling(stem, "-series.json")), warm_up=WARM_UP)
    render_heatmap(report, sibling(stem, ".png"))
    if series is not None:
        save_json(sibling(stem, "-series.json"), series)
    data = report.to_dict()
    save_json(sibling(stem, ".json"), data)
    save_json(latest_profile_path(), data)
    writer.progress(1.0, "done")
    return report


def run_saturation_command(*, contexts: Sequence[int] | None, concurrency: Sequence[int] | None,
                           tokens: int | None, rounds: int | None, kv_pool_mib: int | None,
                           target_ms: Sequence[float] | None, target_x: Sequence[float] | None,
                           kv_dtypes: Sequence[str], as_json: bool, progress_jsonl: bool, model: str | None,
                           max_model_len: int | None, keep_series: bool = False) -> int:
    """The CLI entry: the plan (defaults per device, then overrides), run as a job."""
    def work(job: JobContext) -> SaturationReport:
        from pydantic import ValidationError

        from app.engine.machine import capability

        settings, _ = load_settings()
        base = SweepPlan.default(capability.probe_hardware().engine_kind == "cuda")
        targets = base.targets
        if target_ms or target_x:
            targets = LatencyTargets(tuple(target_ms or ()), tuple(target_x or ()))
        plan = SweepPlan(tuple(sorted(contexts or base.contexts)), tuple(sorted(set(concurrency or base.concurrency))),
                         tokens or base.output_tokens, rounds or base.rounds, max_model_len or base.max_model_len,
                         kv_pool_mib or base.cpu_kv_pool_mib, targets, base.kv_block_size)
        try:
            overrides = {"model": model} if model else {}
            config = EngineConfig.model_validate({**settings.engine.model_dump(), **overrides})
            for dtype in kv_dtypes:
                EngineConfig(kv_cache_dtype=dtype)  # type: ignore[arg-type]
            EngineConfig(max_model_len=plan.max_model_len)
            if plan.cpu_kv_pool_mib:
                EngineConfig(cpu_kv_cache_gib=plan.cpu_kv_pool_mib / 1024)
            if plan.output_tokens < 2:
                raise ValueError("--tokens must be 2 or more (ms/token needs two tokens)")
            if not any(c + plan.output_tokens <= plan.max_model_len for c in plan.contexts):
                raise ValueError(f"no context leaves room for {plan.output_tokens} output tokens "
                                 f"in max_model_len {plan.max_model_len}")
        except ValidationError as exc:
            raise JobFailed(f"Invalid saturation option: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}",
                            "KV dtypes are auto, bfloat16, fp8_e4m3 or fp8_e5m2; --kv-pool-mib is 8 or more; "
                            "--max-model-len is 256 or more.") from None
        except ValueError as exc:
            raise JobFailed(f"Invalid saturation option: {exc}.",
                            "Lower --contexts or --tokens, or raise --max-model-len.") from None
        return run_saturation(config, plan, kv_dtypes=kv_dtypes, writer=job.writer, keep_series=keep_series)

    return run_job(Job("The saturation sweep", work, SaturationReport.to_dict, format_report),
                   jsonl=progress_jsonl, as_json=as_json)
