"""`nalar bench …`: engine-layer overhead, start-up time, trimming, memory; the UI benches are in window_bench/

Targets are checked here, in measurements, not in timed tests. Results print as a
table (or JSON) and are saved under the data dir's bench/ folder.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from app.commands.jobs import machine_description, report_stem, save_json, sibling
from app.commands.window_bench.harness import embedded_engine_config
from app.commands.window_bench.streams import run_ui_benches
from app.core.settings.settings import SamplingConfig

PROMPT = [{"role": "user", "content": "Explain step by step why the sky is blue."}]


# ---- engine: raw AsyncLLM against the engine layer, same engine, same prompt ----------------

async def _layer_run(host: Any, tokens: int, index: int, deltas: list[str] | None = None) -> float:
    from app.engine.events import AnswerDelta, Finished

    first = last = None
    total = 0
    # The loop guard watches as in the app, but only warns: a fixed-length run must not be cut.
    sampling = SamplingConfig(max_tokens=tokens, think_budget=0).with_loop_guard(action="warn")
    async for event in host.generate(PROMPT, sampling, f"layer-{index}", ignore_eos=True):
        if isinstance(event, AnswerDelta):
            if deltas is not None:
                deltas.append(event.text)
            now = time.perf_counter()
            if first is None:
                first = now
            last = now
        elif isinstance(event, Finished):
            assert event.metrics is not None
            total = event.metrics.answer_tokens
    assert first is not None and last is not None, "the engine layer produced no answer"
    return (total - 1) / (last - first)


def loop_guard_us_per_token(deltas: list[str], rounds: int = 5) -> float:
    """The loop detector's own time per token, on a real reply's deltas, watching from the first token
    and never stopping (the worst case: no loop found, every check runs)."""
    from app.core.settings.settings import LoopGuardConfig
    from app.engine.reply.loop_guard import LoopDetector

    config = LoopGuardConfig(start_after_tokens=0)
    best = float("inf")
    for _ in range(rounds):
        detector = LoopDetector(config)
        started = time.perf_counter()
        for text in deltas:
            detector.feed([hash(text)], text)
        best = min(best, time.perf_counter() - started)
    return best * 1e6 / max(1, len(deltas))


def bench_engine(tokens: int, repeats: int = 5) -> dict[str, Any]:
    from app.engine.local.host import EngineHost
    from app.engine.process.bench_entry import raw_run

    host = EngineHost()
    try:
        ready = host.loop_thread.submit(host.start(embedded_engine_config(reasoning_mode=False))).result(600)
        raw, layer = [], []
        deltas: list[str] = []
        for index in range(repeats):  # interleaved, so drift hits both sides alike
            raw.append(host.loop_thread.submit(raw_run(host, tokens, index, PROMPT)).result(600))
            deltas.clear()
            layer.append(host.loop_thread.submit(_layer_run(host, tokens, index, deltas)).result(600))
    finally:
        host.close()
    raw_median, layer_median = statistics.median(raw), statistics.median(layer)
    guard_us = loop_guard_us_per_token(deltas)
    return {"benchmark": "engine", "tokens_per_run": tokens, "repeats": repeats,
            "load_seconds": round(ready.load_seconds, 1), "kv_capacity_tokens": ready.kv_capacity_tokens,
            "raw_asyncllm_tok_s": round(raw_median, 2), "engine_layer_tok_s": round(layer_median, 2),
            "ratio": round(layer_median / raw_median, 3), "raw_runs": [round(x, 2) for x in raw],
            "loop_guard_us_per_token": round(guard_us, 2),
            "loop_guard_share_of_decode": f"{guard_us / (1e6 / layer_median):.3%}",
            "layer_runs": [round(x, 2) for x in layer]}


# ---- trimming: a long conversation cut to the context, on the real tokenizer ----------------------

def _conversation(turns: int, chars: int) -> list[dict[str, str]]:
    words = "the sky is blue because air scatters short wavelengths more than long ones".split()
    messages = [{"role": "system", "content": "Be brief."}]
    for index in range(turns):
        text = " ".join(words[(index + k) % len(words)] for k in range(chars // 5 + 1))[:chars]
        messages.append({"role": "user" if index % 2 == 0 else "assistant", "content": text})
    return messages


def bench_trim(context: int = 4096, repeats: int = 5) -> dict[str, Any]:
    """``fit_prompt`` as EngineHost calls it (reserve a quarter of the context) against the old way."""
    from transformers import AutoTokenizer

    from app.core.models.embedded_model import ensure_embedded_model
    from app.engine.reply.trimming import fit_by_dropping_one_at_a_time, fit_prompt

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_embedded_model()))
    reserve = context // 4

    def median_ms(fit: Any, messages: list[dict[str, str]], runs: int) -> tuple[str, int]:
        """Wall and CPU ms: on a shared machine the wall time is mostly waiting for a core."""
        wall, cpu, dropped = [], [], 0
        for _ in range(runs):
            started, started_cpu = time.perf_counter(), time.process_time()
            _, dropped = fit(messages)
            wall.append((time.perf_counter() - started) * 1000)
            cpu.append((time.process_time() - started_cpu) * 1000)
        return f"{statistics.median(wall):.1f} wall, {statistics.median(cpu):.1f} CPU", dropped

    result: dict[str, Any] = {"benchmark": "trim", "context_tokens": context, "reserve_tokens": reserve,
                              "load_average_1min": round(os.getloadavg()[0], 1)}
    fast = lambda m: fit_prompt(tokenizer, m, limit=context, reserve=reserve, opened_think=False)  # noqa: E731
    fast(_conversation(10, 100))  # warm-up: the template compiles once
    for turns, chars in ((1_000, 600), (1_000, 4_500), (30_000, 1)):
        ms, dropped = median_ms(fast, _conversation(turns, chars), repeats)
        result[f"{turns:,} messages x {chars:,} chars: ms"] = f"{ms} ({dropped:,} dropped)"
    old = lambda m: fit_by_dropping_one_at_a_time(tokenizer, m, budget=context - reserve,  # noqa: E731
                                                  opened_think=False)
    for turns, chars in ((60, 2_000),):
        old_ms, _ = median_ms(old, _conversation(turns, chars), 1)
        new_ms, _ = median_ms(fast, _conversation(turns, chars), repeats)
        result[f"{turns} messages x {chars:,} chars: old way ms"] = old_ms
        result[f"{turns} messages x {chars:,} chars: ms"] = new_ms
    return result


# ---- start-up: process start to window shown ---------------------------------------------------

def bench_startup(repeats: int = 3) -> dict[str, Any]:
    outer, inner = startup_seconds(repeats)
    return {"benchmark": "startup", "repeats": repeats, "process_start_to_window_shown_s": outer,
            "from_first_app_line_s": inner}


def startup_seconds(repeats: int = 3, env: dict[str, str] | None = None) -> tuple[float, float]:
    """`nalar` started ``repeats`` times until its window is shown (then it quits): the medians from process
    start, and from the app's first line. ``env``: the environment (another history, for `bench history`)."""
    env = dict(env or os.environ, NALAR_QUIT_AFTER_SHOWN="1")
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    outer, inner = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "app", "--report-startup"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            if "window shown" in line:
                outer.append(time.perf_counter() - started)
                inner.append(float(line.split("shown")[1].split("s")[0]))
                break
        proc.wait(120)
    if not outer:
        raise RuntimeError("nalar never reported its window shown")
    return round(statistics.median(outer), 3), round(statistics.median(inner), 3)


def bench_memory(runs: int = 5) -> dict[str, Any]:
    """Host memory bandwidth (the same copy the FP8 bench's floor uses), ``runs`` times, and the ceiling it
    puts on the CPU catalog's decode speed: bandwidth ÷ bytes read per token at 4k of context."""
    from app.core.models.cpu_catalog import CPU_CATALOG, EXPECTATION_CONTEXT
    from app.core.models.planner import bytes_read_per_token, measure_host_bandwidth_gbps

    gbps = sorted(measure_host_bandwidth_gbps() for _ in range(runs))
    median = statistics.median(gbps)
    ceilings = {}
    for model in CPU_CATALOG:
        for kv in ("fp8_e4m3", "auto"):
            per_token = bytes_read_per_token(model.config(), context_tokens=EXPECTATION_CONTEXT, kv_dtype=kv)
            ceilings[f"{model.label} ({kv}) tok/s ceiling"] = round(median * 1e9 / per_token, 1)
    return {"benchmark": "memory", "copy": "numpy, one thread, 256 MiB, best of 5, read + write counted",
            "runs_gbps": [round(g, 1) for g in gbps], "median_gbps": round(median, 1),
            "load_average": round(os.getloadavg()[0], 1), **ceilings}


def run_bench(what: str, *, tokens: int, as_json: bool) -> int:
    results: list[dict[str, Any]] = []
    if what in ("startup", "all"):
        results.append(bench_startup())
    if what in ("ui", "all"):
        results += run_ui_benches(tokens)
    if what in ("engine", "all"):
        results.append(bench_engine(tokens))
    if what in ("trim", "all"):
        results.append(bench_trim())
    if what in ("memory", "all"):
        results.append(bench_memory())
    report = {"machine": machine_description(), "when": time.strftime("%Y-%m-%d %H:%M"), "results": results}
    out = save_json(sibling(report_stem("bench", f"bench-{what}"), ".json"), report)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print(f"machine: {report['machine']}")
        for result in results:
            print(f"\n[{result['benchmark']}]")
            for key, value in result.items():
                if key != "benchmark":
                    print(f"  {key:40s} {value}")
        print(f"\nsaved: {out}")
    return 0
