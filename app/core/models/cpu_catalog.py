"""Reasoning models small enough for the CPU engine, sized by RAM, with a speed expectation from measured bandwidth.

A CPU-only PC gets real reasoning models, not only the embedded 135M one: Qwen3-0.6B and -1.7B (a Think
switch) and DeepSeek-R1-Distill-Qwen-1.5B (always thinks). Each ships its ``config.json`` in
``resources/model_configs``, so the planner sizes it before anything is downloaded, and offline.

- **RAM**: the weights, a KV pool the planner sizes for the context (vLLM's CPU engine takes a fixed
  pool), and the runtime around them must fit in ``RAM_SHARE`` of the machine's RAM (inside WSL that is
  the VM's share of Windows' RAM, which is what ``psutil`` reports there).
- **Speed**: decoding on a CPU is bound by memory bandwidth, so the best it can do is
  bandwidth ÷ bytes read per token (planner.bytes_read_per_token). The bandwidth is measured on this
  machine when the dialog opens (a 128 MiB copy, about 0.1 s, once per process), or a conservative
  stored default when that fails. The figure is an upper bound and the dialog says so: on a 2-core VM
  the measured decode ran about 3× below it (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from app.core.models import planner
from app.core.models.model_catalog import CATALOG, MIN_CONTEXT, CatalogModel
from app.core.models.model_families import ModelFamily, model_family
from app.core.models.planner import GIB, PlannerError, attention_shape, bytes_read_per_token, load_model_config, plan
from app.core.settings.settings import is_fp8

log = logging.getLogger(__name__)

CPU_CONTEXT = 16384  # max_model_len when RAM allows; at 5-15 tok/s that is already 20-50 minutes of thinking
# Python, Qt, torch and vLLM in the window's process, the engine process and EngineCore, beside the weights
# and the KV pool: about 2 GiB of RSS on this machine with the embedded model (ps); rounded up.
RUNTIME_OVERHEAD_BYTES = int(2.5 * GIB)
RAM_SHARE = 0.8  # the rest stays with the OS and the user's other programs
# When the measurement fails: one DDR4-2400 channel's ~19 GB/s, halved for a loaded desktop. Conservative.
DEFAULT_BANDWIDTH_GBPS = 8.0
EXPECTATION_CONTEXT = 4096  # the context the tok/s figure is given at (mid-way through a reasoning reply)
MIN_TOKENS_PER_S = 5.0  # the recommendation's floor: slower than this a reasoning reply takes too long


def _catalog_entry(repo_id: str) -> CatalogModel:
    return next(model for model in CATALOG if model.repo_id == repo_id)


# Smallest first. Weight sizes are the published safetensors totals (Qwen3 stores its tied lm_head too).
CPU_CATALOG: tuple[CatalogModel, ...] = (
    CatalogModel("Qwen/Qwen3-0.6B", "Qwen3-0.6B", "Qwen3-0.6B", int(1.50e9), "bf16"),
    _catalog_entry("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"),
    CatalogModel("Qwen/Qwen3-1.7B", "Qwen3-1.7B", "Qwen3-1.7B", int(4.06e9), "bf16"),
)


@dataclass(frozen=True)
class MemoryBandwidth:
    gbps: float
    measured: bool

    def describe(self) -> str:
        return f"{self.gbps:.1f} GB/s measured" if self.measured else \
            f"{self.gbps:.1f} GB/s assumed (no measurement: a conservative default)"


@lru_cache(maxsize=1)
def host_bandwidth() -> MemoryBandwidth:
    """Measured once per process; the stored default when numpy can't run the copy."""
    try:
        return MemoryBandwidth(round(planner.measure_host_bandwidth_gbps(megabytes=128, repeats=5), 1), True)
    except (ImportError, MemoryError, OSError) as exc:
        log.warning("memory bandwidth not measured (%s); assuming %.1f GB/s", exc, DEFAULT_BANDWIDTH_GBPS)
        return MemoryBandwidth(DEFAULT_BANDWIDTH_GBPS, False)


@dataclass(frozen=True)
class CpuRecommendation:
    model: CatalogModel
    family: ModelFamily
    ram_total_bytes: int
    kv_cache_dtype: str
    context: int  # max_model_len to set
    kv_pool_bytes: int  # the CPU engine's KV pool for that context (cpu_kv_cache_gib)
    need_bytes: int  # weights + KV pool + runtime
    fits: bool
    bytes_per_token: int  # read per decoded token at EXPECTATION_CONTEXT
    tokens_per_s: float  # bandwidth ÷ bytes_per_token: an upper bound
    bandwidth: MemoryBandwidth

    def engine_update(self, model_max_len: int | None = None) -> dict[str, Any]:
        """EngineConfig fields for this model on the CPU engine (beside ``model`` and the KV dtype).
        ``model_max_len``: the downloaded config.json's own limit, which the context must not pass."""
        context = min(self.context, model_max_len) if model_max_len else self.context
        return {"max_model_len": context, "cpu_kv_cache_gib": self.kv_pool_bytes / GIB}

    def summary(self) -> str:
        budget = RAM_SHARE * self.ram_total_bytes
        verdict = "fits" if self.fits else f"too big: needs {self.need_bytes / GIB:.1f} of {budget / GIB:.1f} GiB"
        kv = "fp8" if is_fp8(self.kv_cache_dtype) else "bf16"
        return (f"{verdict} · {self.need_bytes / GIB:.1f} GiB of {self.ram_total_bytes / GIB:.1f} GiB RAM "
                f"({self.model.weight_bytes / GIB:.1f} weights {self.model.quantization}, "
                f"{self.kv_pool_bytes / GIB:.2f} KV for {self.context:,} tokens at {kv}, "
                f"{RUNTIME_OVERHEAD_BYTES / GIB:.1f} runtime) · up to {self.tokens_per_s:.0f} tok/s "
                f"({self.bytes_per_token / 1e9:.2f} GB read per token ÷ {self.bandwidth.describe()})\n"
                f"{self.family.summary()}")


def kv_pool_bytes(config: dict[str, Any], kv_cache_dtype: str, context: int) -> int:
    """The pool that holds one conversation of ``context`` tokens, in whole 1/64 GiB (the setting's unit)."""
    raw = attention_shape(config).kv_bytes_per_token(kv_cache_dtype) * context
    return math.ceil(raw / GIB * 64) * GIB // 64


def plan_cpu_model(model: CatalogModel, ram_total_bytes: int, kv_cache_dtype: str,
                   bandwidth: MemoryBandwidth) -> CpuRecommendation:
    """The longest context (CPU_CONTEXT, else MIN_CONTEXT) whose pool, weights and runtime fit the RAM."""
    config = model.config()
    budget = RAM_SHARE * ram_total_bytes
    for context in (CPU_CONTEXT, MIN_CONTEXT):
        pool = kv_pool_bytes(config, kv_cache_dtype, context)
        row = plan(config, model=model.repo_id, weight_bytes=model.weight_bytes, max_model_len=context,
                   kv_dtypes=(kv_cache_dtype,), cpu_kv_pool_bytes=pool).row(kv_cache_dtype)
        need = model.weight_bytes + pool + RUNTIME_OVERHEAD_BYTES
        if row.fits and need <= budget:
            break
    per_token = bytes_read_per_token(config, context_tokens=EXPECTATION_CONTEXT, kv_dtype=kv_cache_dtype)
    return CpuRecommendation(model, model_family(model.repo_id, config.get("model_type")), ram_total_bytes,
                             kv_cache_dtype, context, pool, need, row.fits and need <= budget, per_token,
                             bandwidth.gbps * 1e9 / per_token, bandwidth)


def cpu_recommendations(ram_total_bytes: int, kv_cache_dtype: str,
                        bandwidth: MemoryBandwidth) -> list[CpuRecommendation]:
    """Every CPU catalog model, planned for this RAM, smallest first."""
    return [plan_cpu_model(model, ram_total_bytes, kv_cache_dtype, bandwidth) for model in CPU_CATALOG]


def best_cpu(recs: list[CpuRecommendation]) -> CpuRecommendation | None:
    """The largest model that fits and still reaches MIN_TOKENS_PER_S; else the fastest that fits; None when
    none fits (the embedded model is then the choice)."""
    fitting = [r for r in recs if r.fits]
    quick = [r for r in fitting if r.tokens_per_s >= MIN_TOKENS_PER_S]
    if quick:
        return max(quick, key=lambda r: r.model.weight_bytes)
    return max(fitting, key=lambda r: r.tokens_per_s) if fitting else None


def ram_total_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def downloaded_max_len(folder: Path) -> int | None:
    """The downloaded config.json's max_position_embeddings: once the files are here, they are the truth."""
    try:
        limit = load_model_config(folder).get("max_position_embeddings")
    except PlannerError:
        return None
    return int(limit) if limit else None
