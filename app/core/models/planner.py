"""KvPlanner: what fits before anything loads, from config.json and safetensors headers.

KV bytes per token = 2 (K and V) × layers × KV heads × head_dim × bytes per element.
The CPU engine's capacity is exact arithmetic on vLLM's block layout (its pool is a
fixed size); on a GPU the pool is what is left of VRAM × utilization after the
weights and an overhead we assume and state.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = 1 << 30
GB = 1e9  # bandwidth is quoted in decimal gigabytes per second
BLOCK_SIZE_CPU = 128  # vLLM's CPU backend pages the KV cache in 128-token blocks
BLOCK_SIZE_GPU = 16
# vLLM 0.32 sizes the KV pool as utilization × the CUDA-reported total, minus the weights, the peak of a
# profiled forward pass (activations at max_num_batched_tokens, plus the sampler's logits), memory outside
# torch (CUDA context, cuBLAS workspaces) and the CUDA-graph pool it measures. We estimate each term before
# loading, keep a margin so a planned context fits on the first try, and say so next to every GPU figure.
CUDA_CONTEXT_BYTES = int(0.6 * GIB)  # non-torch memory vLLM counts (context, cuBLAS/NCCL workspaces)
CUDA_GRAPH_BYTES = int(0.75 * GIB)  # the graph pool at vLLM's default capture sizes (0 with enforce_eager)
PROFILE_BATCHED_TOKENS = 8192  # vLLM's default max_num_batched_tokens for an engine it profiles
PROFILE_SAMPLED_SEQS = 256  # the dummy sampler run's batch (max_num_seqs)
PLAN_MARGIN_FRACTION = 0.03  # of the budget: vLLM's profile varies by kernel and allocator
NVML_TO_CUDA_TOTAL = 0.995  # CUDA reports a little less total than NVML (memory the driver reserves)
FREE_VRAM_MARGIN_BYTES = GIB // 2  # left free beside other programs when the utilization is lowered


def activation_bytes(config: dict[str, Any], batched_tokens: int = PROFILE_BATCHED_TOKENS) -> int:
    """Peak activations of vLLM's profile run: one MLP's gate+up output and a few hidden-size buffers per
    batched token (bf16), plus fp32 logits for the sampler's dummy batch."""
    text = config.get("text_config") or {}
    cfg = {**config, **text}
    hidden = int(cfg.get("hidden_size") or 4096)
    intermediate = int(cfg.get("intermediate_size") or 4 * hidden)
    vocab = int(cfg.get("vocab_size") or 32000)
    per_token = (2 * intermediate + 4 * hidden) * 2
    logits = PROFILE_SAMPLED_SEQS * vocab * 4 * 2
    return batched_tokens * per_token + logits


def gpu_overhead_bytes(config: dict[str, Any], budget_bytes: float, enforce_eager: bool = False) -> int:
    """What vLLM takes from the budget besides weights and KV: activations, non-torch memory, CUDA graphs,
    and our margin."""
    graphs = 0 if enforce_eager else CUDA_GRAPH_BYTES
    return int(activation_bytes(config) + CUDA_CONTEXT_BYTES + graphs + PLAN_MARGIN_FRACTION * budget_bytes)


def utilization_for_free_vram(chosen: float, free_bytes: float, total_bytes: float,
                              margin_bytes: float = FREE_VRAM_MARGIN_BYTES) -> float:
    """vLLM refuses to start unless free ≥ utilization × total: min(chosen, (free − margin) ÷ total),
    rounded down to a hundredth, and never below vLLM's smallest useful share."""
    fits = (free_bytes - margin_bytes) / total_bytes
    return max(0.06, min(chosen, int(fits * 100) / 100))

KV_ELEMENT_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4,
               "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}

# Peak memory bandwidth (GB/s) of common cards, from the vendors' spec sheets.
BANDWIDTH_GBPS = {
    "RTX 3060": 360, "RTX 3060 Ti": 448, "RTX 3070": 448, "RTX 3070 Ti": 608, "RTX 3080": 760,
    "RTX 3080 Ti": 912, "RTX 3090": 936, "RTX 3090 Ti": 1008,
    "RTX 4060": 272, "RTX 4060 Ti": 288, "RTX 4070": 504, "RTX 4070 SUPER": 504, "RTX 4070 Ti": 504,
    "RTX 4070 Ti SUPER": 672, "RTX 4080": 717, "RTX 4080 SUPER": 736, "RTX 4090": 1008,
    "RTX 5060": 448, "RTX 5060 Ti": 448, "RTX 5070": 672, "RTX 5070 Ti": 896, "RTX 5080": 960, "RTX 5090": 1792,
    "A10": 600, "L4": 300, "A100-SXM4-40GB": 1555, "A100-PCIE-40GB": 1555, "A100 80GB": 1935,
    "A100-SXM4-80GB": 2039, "H100 PCIe": 2000, "H100 80GB HBM3": 3350, "H100": 3350, "H200": 4800,
}


class PlannerError(ValueError):
    """The model can't be planned; the message says why in plain words."""


def bandwidth_for(gpu_name: str) -> float | None:
    """GB/s for a GPU name as NVML reports it ("NVIDIA GeForce RTX 4090"), longest match first."""
    name = gpu_name.upper().replace("NVIDIA", "").replace("GEFORCE", "").strip()
    for key in sorted(BANDWIDTH_GBPS, key=len, reverse=True):
        if key.upper() in name:
            return float(BANDWIDTH_GBPS[key])
    return None


@dataclass(frozen=True)
class AttentionShape:
    layers: int
    kv_heads: int
    head_dim: int
    kind: str = "full"  # "full" or "mla"
    mla_latent: int = 0  # kv_lora_rank + rope dim, for MLA
    note: str = ""

    def kv_bytes_per_token(self, kv_dtype: str) -> int:
        element = KV_ELEMENT_BYTES[kv_dtype]
        if self.kind == "mla":  # one compressed latent per layer, not separate K and V
            return self.layers * self.mla_latent * element
        return 2 * self.layers * self.kv_heads * self.head_dim * element


def attention_shape(config: dict[str, Any]) -> AttentionShape:
    text = config.get("text_config") or {}
    cfg = {**config, **text}
    layers = cfg.get("num_hidden_layers") or cfg.get("n_layer") or cfg.get("num_layers")
    heads = cfg.get("num_attention_heads") or cfg.get("n_head")
    if not layers or not heads:
        raise PlannerError("config.json has no num_hidden_layers / num_attention_heads: not a decoder model "
                           "the planner knows.")
    if cfg.get("kv_lora_rank"):
        latent = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim", 0))
        return AttentionShape(int(layers), 1, latent, "mla", latent, "MLA: one latent vector per layer and token.")
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = cfg.get("head_dim") or (int(cfg["hidden_size"]) // int(heads) if cfg.get("hidden_size") else None)
    if not head_dim:
        raise PlannerError("config.json gives neither head_dim nor hidden_size.")
    note = ""
    types = cfg.get("layer_types") or []
    if cfg.get("model_type") == "gpt_oss" and "sliding_attention" in types:
        # vLLM's hybrid KV manager pages the sliding-window layers (128 tokens) apart from the full ones: per
        # token of context only the full-attention layers grow; the window's few blocks per chat are margin.
        full = sum(1 for kind in types if kind == "full_attention")
        return AttentionShape(full, kv_heads, int(head_dim), note=(
            f"{len(types) - full} of {len(types)} layers attend over a {cfg.get('sliding_window')}-token window "
            "and hold a fixed few blocks per conversation; the per-token figures count the full-attention layers."))
    if cfg.get("use_sliding_window") or (cfg.get("sliding_window") and cfg.get("use_sliding_window") is None
                                         and cfg.get("model_type") in ("mistral", "gemma2", "gemma3")):
        note = "Sliding-window layers are counted as full attention: the figures are an upper bound."
    return AttentionShape(int(layers), kv_heads, int(head_dim), note=note)


def read_safetensors_weight_bytes(folder: Path) -> int | None:
    """Sum of tensor sizes from the safetensors headers (8-byte length + JSON), without reading weights."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        with file.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            count = 1
            for dim in meta["shape"]:
                count *= dim
            total += count * DTYPE_BYTES.get(meta["dtype"], 2)
    return total


def estimate_weight_bytes(config: dict[str, Any], bytes_per_param: float = 2.0) -> int:
    """Dense decoder estimate for models not on disk yet: embeddings + attention + MLP per layer."""
    hidden = int(config["hidden_size"])
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    intermediate = int(config.get("intermediate_size") or 4 * hidden)
    vocab = int(config.get("vocab_size") or 32000)
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = 3 * hidden * intermediate
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return int((layers * (attention + mlp) + embeddings) * bytes_per_param)


def bytes_read_per_token(config: dict[str, Any], *, context_tokens: int, kv_dtype: str,
                         weight_element_bytes: float = 2.0) -> int:
    """What one decode step reads from memory: every weight once, except the input embedding table, of
    which it reads one row (a tied table is still read whole, as the output layer), plus the KV of the
    context. Divided by memory bandwidth this is the floor under ms/token on a bandwidth-bound machine."""
    weights = estimate_weight_bytes(config, weight_element_bytes)
    if not config.get("tie_word_embeddings"):
        weights -= int(int(config.get("vocab_size") or 32000) * int(config["hidden_size"]) * weight_element_bytes)
    return weights + attention_shape(config).kv_bytes_per_token(kv_dtype) * context_tokens


@dataclass(frozen=True)
class PlanRow:
    kv_cache_dtype: str
    kv_bytes_per_token: int
    kv_bytes_per_sequence: int
    kv_pool_bytes: int
    capacity_tokens: int
    max_concurrency: float
    fits: bool
    floor_ms_per_token: float | None  # bytes read per token ÷ bandwidth, at full context


@dataclass(frozen=True)
class Plan:
    model: str
    weight_bytes: int
    weights_estimated: bool
    max_model_len: int
    model_max_len: int | None
    device: str
    assumption: str
    shape: AttentionShape
    rows: tuple[PlanRow, ...] = field(default_factory=tuple)

    def row(self, kv_cache_dtype: str) -> PlanRow:
        return next(r for r in self.rows if r.kv_cache_dtype == kv_cache_dtype)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "weight_gib": round(self.weight_bytes / GIB, 3),
                "weights_estimated": self.weights_estimated, "max_model_len": self.max_model_len,
                "model_max_len": self.model_max_len, "device": self.device, "assumption": self.assumption,
                "note": self.shape.note,
                "rows": [{"kv_cache_dtype": r.kv_cache_dtype, "kv_bytes_per_token": r.kv_bytes_per_token,
                          "kv_gib_per_sequence": round(r.kv_bytes_per_sequence / GIB, 3),
                          "capacity_tokens": r.capacity_tokens, "max_concurrency": round(r.max_concurrency, 2),
                          "fits": r.fits, "floor_ms_per_token": None if r.floor_ms_per_token is None
                          else round(r.floor_ms_per_token, 2)} for r in self.rows]}


def load_model_config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlannerError(f"{model_dir} has no config.json.") from None
    except (OSError, ValueError) as exc:
        raise PlannerError(f"{path} can't be read: {exc}.") from None


def plan(config: dict[str, Any], *, model: str = "", weight_bytes: int | None = None, max_model_len: int,
         kv_dtypes: tuple[str, ...] = ("auto", "fp8_e4m3"), cpu_kv_pool_bytes: int | None = None,
         vram_total_bytes: int | None = None, gpu_memory_utilization: float = 0.9,
         bandwidth_gbps: float | None = None, block_size: int | None = None,
         enforce_eager: bool = False) -> Plan:
    """Plan the CPU engine (``cpu_kv_pool_bytes``) or a GPU (``vram_total_bytes``, as NVML reports it).

    ``block_size``: the engine's KV block size where it is not vLLM's default for the device.
    """
    shape = attention_shape(config)
    estimated = weight_bytes is None
    if weight_bytes is None:
        weight_bytes = estimate_weight_bytes(config)
    model_max = config.get("max_position_embeddings")
    rows = []
    if cpu_kv_pool_bytes is not None:
        device, block = "cpu", block_size or BLOCK_SIZE_CPU
        pool = cpu_kv_pool_bytes
        assumption = f"CPU engine: a fixed KV pool of {pool / GIB:.2f} GiB, in {block}-token blocks."
    elif vram_total_bytes is not None:
        device, block = "gpu", block_size or BLOCK_SIZE_GPU
        budget = vram_total_bytes * NVML_TO_CUDA_TOTAL * gpu_memory_utilization
        overhead = gpu_overhead_bytes(config, budget, enforce_eager)
        pool = int(max(0.0, budget - weight_bytes - overhead))
        assumption = (f"GPU: {gpu_memory_utilization:.0%} of {vram_total_bytes / GIB:.1f} GiB, minus the weights "
                      f"and an assumed {overhead / GIB:.1f} GiB for activations, CUDA context, CUDA graphs and "
                      "a margin (vLLM measures the real figure at start).")
    else:
        raise ValueError("plan() needs cpu_kv_pool_bytes or vram_total_bytes")
    for kv_dtype in kv_dtypes:
        per_token = shape.kv_bytes_per_token(kv_dtype)
        blocks = pool // (per_token * block)
        capacity = int(blocks * block)
        per_sequence = per_token * max_model_len
        floor = None
        if bandwidth_gbps:
            floor = (weight_bytes + per_sequence) / (bandwidth_gbps * 1e9) * 1000
        rows.append(PlanRow(kv_dtype, per_token, per_sequence, pool, capacity, capacity / max_model_len,
                            capacity >= max_model_len, floor))
    return Plan(model, weight_bytes, estimated, max_model_len, int(model_max) if model_max else None, device,
                assumption, shape, tuple(rows))


def plan_for_folder(model_dir: Path, **kwargs: Any) -> Plan:
    config = load_model_config(model_dir)
    return plan(config, model=str(model_dir), weight_bytes=read_safetensors_weight_bytes(model_dir), **kwargs)


@dataclass(frozen=True)
class DraftCost:
    """What a draft model adds to the target's memory: its weights, and its KV beside the target's in vLLM's
    one pool (each token's KV grows by the draft's layers, so the pool holds fewer tokens)."""

    model: str
    weight_bytes: int
    kv_bytes_per_token: int
    kv_bytes_per_sequence: int


def draft_cost(draft_dir: Path, max_model_len: int, kv_cache_dtype: str) -> DraftCost:
    """The draft's weights (safetensors headers) and KV at this context and dtype, from its config.json."""
    config = load_model_config(draft_dir)
    weights = read_safetensors_weight_bytes(draft_dir) or estimate_weight_bytes(config)  # no safetensors: estimated
    return draft_cost_for(config, weights, str(draft_dir), max_model_len, kv_cache_dtype)


def draft_cost_for(config: dict[str, Any], weight_bytes: int, name: str, max_model_len: int,
                   kv_cache_dtype: str) -> DraftCost:
    """A draft's cost from its config and weight size (a catalog draft is planned before it is downloaded)."""
    per_token = attention_shape(config).kv_bytes_per_token(kv_cache_dtype)
    return DraftCost(name, weight_bytes, per_token, per_token * max_model_len)


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
