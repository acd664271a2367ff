"""`nalar bench compare`: a Compare of three variants on the embedded model, all at once vs one after another.

The three variants are the dialog's defaults in kind (Think off, a think budget, a temperature), each a fixed
number of tokens (``ignore_eos``), through EngineHost's generate() as the app's engine process runs it. Both
modes run in turns, ``rounds`` times (at once, then one after another), so drift on a shared machine hits both
alike; the report is each mode's median wall time and the tokens per second over all three replies.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

from app.commands.jobs import machine_description, report_stem, save_json, sibling
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.core.steering.compare import Variant

PROMPT = "A train leaves at 3 pm at 60 km/h; another leaves the same station at 4 pm at 90 km/h. When does it catch up?"


@dataclass(frozen=True)
class ModeRun:
    mode: str  # "at once" or "one after another"
    round: int
    wall_s: float
    tokens: int  # thinking and answer tokens of the three replies
    peak_running: int  # the most requests vLLM's scheduler reported running at once


async def _reply(host: Any, sampling: SamplingConfig, request_id: str) -> int:
    from app.engine.events import Finished

    tokens = 0
    async for event in host.generate([{"role": "user", "content": PROMPT}], sampling, request_id, ignore_eos=True):
        if isinstance(event, Finished):
            assert event.metrics is not None and event.reason in ("stop", "length"), f"{request_id}: {event.reason}"
            tokens = event.metrics.thinking_tokens + event.metrics.answer_tokens
    return tokens


async def _mode(host: Any, samplings: list[SamplingConfig], together: bool, tag: str) -> tuple[float, int, int]:
    peak = 0

    def record(stats: Any) -> None:
        nonlocal peak
        peak = max(peak, stats.running)

    host.kv.on_record = record
    start = time.perf_counter()
    try:
        if together:
            tokens = sum(await asyncio.gather(*(_reply(host, s, f"{tag}-{n}") for n, s in enumerate(samplings))))
        else:
            tokens = 0
            for n, sampling in enumerate(samplings):
                tokens += await _reply(host, sampling, f"{tag}-{n}")
    finally:
        host.kv.on_record = None
    return time.perf_counter() - start, tokens, peak


def bench_compare(*, tokens: int, rounds: int = 3, log: Any = print) -> dict[str, Any]:
    """Both modes, ``rounds`` times each, in turns; typed runs inside, a dict at the JSON edge."""
    from app.core.models.embedded_model import ensure_embedded_model
    from app.engine.local.host import EngineHost

    base = SamplingConfig(temperature=0.6, think_budget=tokens, max_tokens=tokens).with_loop_guard(action="warn")
    variants = [Variant.think_off(), Variant.budget(tokens // 2), Variant.at_temperature(1.0)]
    samplings = [variant.sampling(base) for variant in variants]
    model = str(ensure_embedded_model())
    host = EngineHost()
    runs: list[ModeRun] = []
    try:
        host.loop_thread.submit(host.start(EngineConfig(model=model, max_model_len=2048))).result(600)
        host.loop_thread.submit(_mode(host, samplings[:1], False, "warm-up")).result(600)
        for n in range(rounds):
            for mode, together in (("at once", True), ("one after another", False)):
                wall, count, peak = host.loop_thread.submit(
                    _mode(host, samplings, together, f"r{n}-{'t' if together else 's'}")).result(1800)
                runs.append(ModeRun(mode, n, wall, count, peak))
                log(f"round {n + 1}, {mode}: {wall:.2f} s, {count} tokens, {peak} running at most")
    finally:
        host.close()
    summary = {}
    for mode in ("at once", "one after another"):
        mine = [r for r in runs if r.mode == mode]
        wall = statistics.median(r.wall_s for r in mine)
        summary[mode] = {"median_wall_s": round(wall, 2), "tokens": mine[0].tokens,
                         "tok_s": round(mine[0].tokens / wall, 1), "peak_running": max(r.peak_running for r in mine)}
    speedup = summary["one after another"]["median_wall_s"] / summary["at once"]["median_wall_s"]
    table = "\n".join([f"{'mode':<20}{'wall (median)':>15}{'tokens':>8}{'tok/s':>8}{'running':>9}", *(
        f"{mode:<20}{s['median_wall_s']:>13.2f} s{s['tokens']:>8}{s['tok_s']:>8.1f}{s['peak_running']:>9}"
        for mode, s in summary.items()), f"at once is {speedup:.2f}× faster than one after another"])
    return {"benchmark": "compare", "model": model, "variants": [v.label for v in variants],
            "think_budget": tokens, "answer_tokens": tokens, "rounds": rounds, "summary": summary,
            "speedup": round(speedup, 2), "runs": [asdict(r) for r in runs], "table": table}


def run_compare_bench(*, tokens: int, as_json: bool) -> int:
    result = bench_compare(tokens=tokens)
    report = {"machine": machine_description(), "when": time.strftime("%Y-%m-%d %H:%M"), "results": [result]}
    out = save_json(sibling(report_stem("bench", "bench-compare"), ".json"), report)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print(f"machine: {report['machine']}\n\n{result['table']}\n\nsaved: {out}")
    return 0
