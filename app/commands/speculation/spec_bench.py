"""`nalar bench spec`: the same prompts decoded with each speculative method vLLM accepts here and with none.

One engine per method, all held at once, so the prompts run interleaved (each prompt with every method in
turn: drift on a shared machine hits them alike). Greedy, fixed token counts (``ignore_eos``): each prompt
thinks for a fixed number of tokens, then answers for a fixed number, through EngineHost as the app does, and
each phase is timed on its own. A second, raw run of the thinking prompt with top-2 log-probabilities finds
where the greedy tokens first part from no speculation's, and the margin there (spec_report).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from app.commands.jobs import machine_description, report_stem, save_json, sibling
from app.commands.speculation.spec_report import Divergence, PhaseRun, first_divergence, report_text, summarise
from app.core.measure.kv_engine_report import LOOPING_WORD_PROBLEMS
from app.core.measure.kv_quality import REASONING_PROMPTS
from app.core.settings.settings import EngineConfig, SamplingConfig

# The golden reasoning prompts, and one that thinks long (its thinking gets four times the tokens).
LONG_THINKING = ("Plan, step by step, a week of meals for a family of four on 120 dollars, checking the cost "
                 "of each day and the total as you go. " + LOOPING_WORD_PROBLEMS[8])
PROMPTS: tuple[tuple[str, str, int], ...] = (
    *((f"reasoning {i + 1}", text, 1) for i, text in enumerate(REASONING_PROMPTS)), ("long thinking", LONG_THINKING, 4))
Log = Callable[[str], None]


def _config(model: str, method: str, kv_cache_dtype: str) -> EngineConfig:
    return EngineConfig(model=model, max_model_len=2048, kv_cache_dtype=kv_cache_dtype,  # type: ignore[arg-type]
                        speculative_method=method, cpu_kv_cache_gib=0.5)  # type: ignore[arg-type]


async def timed_reply(host: Any, method: str, name: str, prompt: str, thinking: int, answer: int) -> PhaseRun:
    """One two-phase greedy reply through EngineHost, each phase timed from its first delta to its last."""
    from app.engine.events import AnswerDelta, Finished, ThinkingDelta

    sampling = SamplingConfig(temperature=0.0, think_budget=thinking, max_tokens=answer).with_loop_guard(
        action="warn")  # a fixed-length run must not be cut
    times: dict[str, list[float]] = {"thinking": [], "answer": []}
    finished = None
    async for event in host.generate([{"role": "user", "content": prompt}], sampling, f"{method}-{name}",
                                     ignore_eos=True):
        if isinstance(event, (ThinkingDelta, AnswerDelta)):
            times["thinking" if isinstance(event, ThinkingDelta) else "answer"].append(time.perf_counter())
        elif isinstance(event, Finished):
            finished = event
    assert finished is not None and finished.metrics is not None, f"{method} {name}: no reply"
    metrics, spec = finished.metrics, finished.metrics.speculation

    def span(phase: str) -> float:
        return times[phase][-1] - times[phase][0] if len(times[phase]) > 1 else 0.0

    return PhaseRun(method, name, metrics.thinking_tokens, span("thinking"), metrics.answer_tokens, span("answer"),
                    spec.drafts if spec else 0, spec.draft_tokens if spec else 0, spec.accepted_tokens if spec else 0)


async def greedy_tokens(host: Any, prompt: str, tokens: int, request_id: str
                        ) -> tuple[list[int], list[dict[int, float]]]:
    """The thinking prompt's greedy tokens from raw AsyncLLM, with the top-2 log-probabilities of each."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    ids, _ = host.fit_prompt([{"role": "user", "content": prompt}], reserve=tokens, opened_think=True)
    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True, logprobs=2,
                            output_kind=RequestOutputKind.FINAL_ONLY)
    final = None
    async for output in host.raw_generate(ids, params, request_id):
        final = output.outputs[0]
    assert final is not None and final.logprobs is not None
    return list(final.token_ids), [{t: lp.logprob for t, lp in step.items()} for step in final.logprobs]


def bench_spec(*, tokens: int, kv_cache_dtype: str = "auto", log: Log = print) -> dict[str, Any]:
    """Every method vLLM accepts here against none, interleaved; a typed run list, a dict at the JSON edge."""
    from app.core.models.embedded_model import ensure_embedded_model
    from app.engine.local.host import EngineHost

    model = str(ensure_embedded_model())
    hosts: dict[str, Any] = {}
    refused: dict[str, str] = {}
    try:
        off = hosts["off"] = EngineHost()
        ready = off.loop_thread.submit(off.start(_config(model, "off", kv_cache_dtype))).result(600)
        for verdict in ready.speculation:  # vLLM's judgement at that start decides which methods run
            if not verdict.works:
                refused[verdict.method] = verdict.reason or ""
                log(f"{verdict.method}: not run, vLLM refuses it here: {verdict.reason}")
                continue
            log(f"starting an engine with {verdict.method}…")
            host = hosts[verdict.method] = EngineHost()
            host.loop_thread.submit(host.start(_config(model, verdict.method, kv_cache_dtype))).result(600)
        runs: list[PhaseRun] = []
        divergences: list[Divergence] = []
        for name, prompt, scale in PROMPTS:
            thinking = tokens * scale
            streams = {}
            for method, host in hosts.items():
                log(f"{name}: {method}")
                runs.append(host.loop_thread.submit(
                    timed_reply(host, method, name, prompt, thinking, tokens // 2)).result(1800))
                streams[method] = host.loop_thread.submit(
                    greedy_tokens(host, prompt, thinking, f"raw-{method}-{name}")).result(1800)
            decode = off.tokenizer.decode
            for method, (ids, logprobs) in streams.items():
                if method != "off":
                    divergences.append(first_divergence(method, name, streams["off"][0], ids, streams["off"][1],
                                                        logprobs, decode))
    finally:
        for host in hosts.values():
            host.close()
    summaries = summarise(runs)
    return {"benchmark": "spec", "model": model, "kv_cache_dtype": kv_cache_dtype, "thinking_tokens": tokens,
            "answer_tokens": tokens // 2, "refused": refused, "summary": [asdict(s) for s in summaries],
            "divergences": [asdict(d) | {"near_tie": d.near_tie} for d in divergences],
            "runs": [asdict(r) for r in runs], "table": report_text(summaries, divergences)}


def run_spec_bench(*, tokens: int, kv_cache_dtype: str, as_json: bool) -> int:
    result = bench_spec(tokens=tokens, kv_cache_dtype=kv_cache_dtype)
    report = {"machine": machine_description(), "when": time.strftime("%Y-%m-%d %H:%M"), "results": [result]}
    out = save_json(sibling(report_stem("bench", "bench-spec"), ".json"), report)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print(f"machine: {report['machine']}\n\n{result['table']}\n\nsaved: {out}")
    clear = [d for d in result["divergences"] if not d["near_tie"]]
    return 1 if clear else 0  # a split at a clear margin is a bug: the command says so by its exit code
