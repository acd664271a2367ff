"""One start's decisions, made once in the engine process where the facts are.

First what the machine allows (the driver, the toolchain, the KV dtype: cheap checks, before a model is
fetched), then what this start asks vLLM for (the context and memory share for the VRAM free now, the
sampler, the environment). The result is the typed StartPlan the window shows once the engine is ready.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from app.core.settings.settings import EngineConfig
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import StartPlan
from app.engine.machine import capability, gpu_start
from app.engine.machine.capability import HardwareProbe, KvVerdict
from app.engine.machine.gpt_oss_gate import model_is_gpt_oss, mxfp4_refusal
from app.engine.machine.gpu_start import GpuBudget, Toolchain

SAMPLER_ENV = "VLLM_USE_FLASHINFER_SAMPLER"


@dataclass(frozen=True)
class MachineFacts:
    """What the machine allows this config: read before the model is found, so a refusal comes at once."""

    probe: HardwareProbe
    tools: Toolchain | None  # read on a GPU machine only
    kv: KvVerdict


def check_machine(config: EngineConfig, probe: HardwareProbe) -> MachineFacts:
    """Raises the typed failure (with its fix) of a config this machine can't start: an old driver, a missing
    compiler, a card gpt-oss's MXFP4 weights can't run on, or a KV dtype it can't run
    (``capability.judge_kv_dtype``, the one judgement)."""
    tools = gpu_start.check_gpu_machine() if probe.engine_kind == "cuda" else None
    sinks = probe.engine_kind == "cuda" and bool(probe.gpus) and model_is_gpt_oss(config.model)
    if sinks and (refusal := mxfp4_refusal(probe.gpus[0].name, probe.gpus[0].compute_capability)):
        raise EngineFailure(FailureKind.GPU_TOO_OLD, refusal, "Use a model without MXFP4 weights on this card.")
    verdict = capability.judge_kv_dtype(config.kv_cache_dtype, probe, sinks=sinks,
                                        kernels=None if tools is None else tools.has_kernels)
    if not verdict.works:
        raise verdict.failure()
    return MachineFacts(probe, tools, verdict)


def plan_start(config: EngineConfig, facts: MachineFacts, model_dir: Path | None,
               environ: dict[str, str] | None = None) -> StartPlan:
    """This start's plan: the config fitted to the VRAM free now (this start only), and the environment."""
    budget = gpu_start.budget_for_now(config, model_dir) if facts.tools is not None else GpuBudget(config, "")
    current = dict(os.environ) if environ is None else environ
    environment = gpu_start.engine_environment(facts.probe, facts.tools, current)
    sampler = facts.tools is not None and {**current, **environment}.get(SAMPLER_ENV, "1") != "0"
    notes = [budget.note] if budget.note else []
    if facts.tools is not None and not sampler:
        notes.append("FlashInfer's sampler is off (no kernels here): PyTorch's samples instead.")
    return StartPlan(budget.config, facts.kv.backend, sampler, tuple(notes), tuple(sorted(environment.items())))
