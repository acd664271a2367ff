"""`nalar bench`: is an FP8 KV cache worth it for the configured model on this machine?

Each KV dtype gets one engine start (prefix caching off, so every prompt is really prefilled),
the fixed reasoning prompts for time to first token, then one prompt per context depth for
decode ms/token. The planner's bandwidth floor (weights + KV at that depth, read once per
token) sets each figure in proportion (app/core/measure/fp8_bench.py). Results are saved as JSON plus a
PNG plot in the data dir's bench/ folder. SIGTERM/SIGINT end the run with the engine closed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from app.commands.jobs import Job, JobContext, JobFailed, machine_description, report_stem, run_job, save_json, sibling
from app.core.measure.fp8_bench import (
    DEFAULT_DEPTHS,
    DEFAULT_KV_DTYPES,
    DtypeRun,
    Footprint,
    Fp8Report,
    bandwidth,
    depth_figures,
    depth_prompt_ids,
    floor_ms,
    format_report,
    model_footprint,
    plan_depths,
)
from app.core.measure.job_lines import JobLineWriter
from app.core.measure.kv_quality import REASONING_PROMPTS
from app.core.measure.plots import render_fp8_plot
from app.core.settings.settings import EngineConfig, changed, load_settings

WARMUP_TOKENS = 8
WARM_UP = f"one untimed {WARMUP_TOKENS}-token request after each engine start, before the first measurement"


# ---- measuring one engine --------------------------------------------------------------------

async def timed_generation(host: Any, prompt_ids: list[int], tokens: int, request_id: str) -> tuple[float, float]:
    """(TTFT s, decode ms/token) of one greedy request of ``tokens`` tokens (ignore_eos), straight on AsyncLLM."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True, output_kind=RequestOutputKind.DELTA)
    called = time.perf_counter()
    first: float | None = None
    last = called
    after_first = 0
    async for output in host.raw_generate(prompt_ids, params, request_id):
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
    if last <= first:
        # Every token came in the first output: on a busy machine vLLM hands the deltas over together, so the
        # decode can't be told from the prefill here. The whole request per token, an upper bound, not 0 ms.
        return first - called, (last - called) * 1000 / (after_first + 1)
    return first - called, (last - first) * 1000 / after_first


def _chat_ids(host: Any, prompt: str) -> list[int]:
    text = host.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                               tokenize=False)
    return list(host.tokenizer.encode(text, add_special_tokens=False))


class Progress:
    """Fractions over the whole run: one step per engine start and per measurement."""

    def __init__(self, writer: JobLineWriter, total_steps: int) -> None:
        self.writer, self.total, self.done = writer, max(1, total_steps), 0

    def step(self, message: str) -> None:
        self.writer.progress(round(self.done / self.total, 3), message)
        self.done += 1


def measure_dtype(config: EngineConfig, depths: Sequence[int], tokens: int, progress: Progress,
                  footprint: Footprint, gbps: float | None) -> DtypeRun:
    """One engine start with ``config``; every figure for its KV dtype; the engine closed afterwards."""
    from app.engine.local.host import EngineHost

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
        kv_per_token = footprint.kv_bytes_per_token.get(dtype)
        for index, depth in enumerate(depths):
            progress.step(f"{dtype}: context depth {depth:,}")
            ttft, ms = host.loop_thread.submit(timed_generation(
                host, depth_prompt_ids(host.tokenizer, depth, index), tokens, f"{dtype}-depth-{depth}")).result(900)
            rows.append(depth_figures(depth, ttft, ms, floor_ms(footprint.weight_bytes, kv_per_token, depth, gbps)))
        return DtypeRun(dtype, True, None, load_seconds=round(ready.load_seconds, 1),
                        kv_capacity_tokens=ready.kv_capacity_tokens, max_concurrency=round(ready.max_concurrency, 2),
                        max_model_len=ready.max_model_len, kv_bytes_per_token=kv_per_token,
                        ttft_s=round(statistics.median(t for t, _ in short), 4),
                        ms_per_token=round(statistics.median(ms for _, ms in short), 3),
                        tok_s=round(statistics.median(1000 / ms for _, ms in short), 2), depths=tuple(rows))
    finally:
        host.close()  # also during the load (a cancel): it ends the processes that load started


# ---- the whole run ---------------------------------------------------------------------------

def run_fp8_bench(config: EngineConfig, *, depths: Sequence[int] = DEFAULT_DEPTHS, tokens: int = 64,
                  kv_dtypes: Sequence[str] = DEFAULT_KV_DTYPES, writer: JobLineWriter | None = None,
                  probe: Any = None) -> Fp8Report:
    """Measure each KV dtype in turn; save JSON and PNG; return the report (with their paths)."""
    from app.core.models.embedded_model import ensure_embedded_model
    from app.engine.errors import EngineFailure, FailureKind
    from app.engine.local.host import check_model_path
    from app.engine.machine import capability

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
            runs.append(DtypeRun(dtype, False, reasons[dtype]))
            continue
        try:
            runs.append(measure_dtype(changed(config, kv_cache_dtype=dtype), kept, tokens, progress, footprint,
                                      band.gb_s))
        except EngineFailure as failure:  # e.g. auto runs out of memory where fp8 fits: keep the other rows
            if failure.kind is FailureKind.MODEL_NOT_FOUND:
                raise
            runs.append(DtypeRun(dtype, False, f"{failure.message} {failure.fix}"))
    stem = report_stem("bench", "fp8")
    report = Fp8Report(
        model=model, max_model_len=config.max_model_len, tokens_per_measurement=tokens, depths=tuple(kept),
        capped_depths={str(asked): used for asked, used in capped.items()},
        capped_reason=(f"max_model_len {config.max_model_len} leaves room for {tokens} output tokens "
                       f"after at most {kept[-1]} prompt tokens" if capped else None),
        bandwidth=band, weight_bytes=footprint.weight_bytes, footprint_note=footprint.note, runs=tuple(runs),
        machine=machine_description(), json=str(sibling(stem, ".json")), png=str(sibling(stem, ".png")),
        warm_up=WARM_UP)
    render_fp8_plot(report, sibling(stem, ".png"))
    save_json(sibling(stem, ".json"), report.to_dict())
    writer.progress(1.0, "done")
    return report


def run_fp8_bench_command(*, depths: Sequence[int], tokens: int, kv_dtypes: Sequence[str], as_json: bool,
                          progress_jsonl: bool, model: str | None = None, max_model_len: int | None = None) -> int:
    """The CLI entry: the settings' engine config (plus overrides), run as a job."""
    def work(job: JobContext) -> Fp8Report:
        from pydantic import ValidationError

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
            raise JobFailed(f"Invalid benchmark option: {exc.errors()[0]['msg']}",
                            "KV dtypes are auto, bfloat16, fp8_e4m3 or fp8_e5m2; max_model_len is 256 or more.") \
                from None
        return run_fp8_bench(config, depths=depths, tokens=tokens, kv_dtypes=kv_dtypes, writer=job.writer)

    return run_job(Job("The benchmark", work, Fp8Report.to_dict, format_report), jsonl=progress_jsonl,
                   as_json=as_json)
