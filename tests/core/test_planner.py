"""KvPlanner on real config.json fields, and against what the real engine reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.models.planner import (
    GIB,
    PlannerError,
    attention_shape,
    bandwidth_for,
    estimate_weight_bytes,
    plan,
    plan_for_folder,
)
from tests.conftest import require_embedded_model

CONFIGS = Path(__file__).resolve().parents[1] / "support" / "data" / "configs"


def config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


@pytest.mark.parametrize("name, bf16_bytes_per_token, params_billion", [
    ("DeepSeek-R1-Distill-Qwen-14B", 2 * 48 * 8 * 128 * 2, 14.77),
    ("QwQ-32B", 2 * 64 * 8 * 128 * 2, 32.76),
    ("Qwen3-8B", 2 * 36 * 8 * 128 * 2, 8.19),
    ("Llama-3.1-8B", 2 * 32 * 8 * 128 * 2, 8.03),
])
def test_kv_bytes_per_token_and_weights(name: str, bf16_bytes_per_token: int, params_billion: float) -> None:
    shape = attention_shape(config(name))
    assert shape.kv_bytes_per_token("auto") == bf16_bytes_per_token
    assert shape.kv_bytes_per_token("fp8_e4m3") == bf16_bytes_per_token // 2
    assert estimate_weight_bytes(config(name)) / 2e9 == pytest.approx(params_billion, rel=0.02)


def test_head_dim_is_derived_when_missing_and_gqa_counts_kv_heads() -> None:
    shape = attention_shape(config("Llama-3.1-8B"))
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (32, 8, 128)


def test_mla_models_store_one_latent_per_layer() -> None:
    mla = {"num_hidden_layers": 61, "num_attention_heads": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
           "hidden_size": 7168}
    shape = attention_shape(mla)
    assert shape.kind == "mla" and shape.kv_bytes_per_token("auto") == 61 * 576 * 2


def test_sliding_window_is_said_plainly() -> None:
    mistral = {"model_type": "mistral", "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "hidden_size": 4096, "sliding_window": 4096}
    assert "upper bound" in attention_shape(mistral).note
    assert attention_shape(config("QwQ-32B")).note == ""  # use_sliding_window is false


def test_unknown_architectures_are_refused_with_a_reason() -> None:
    with pytest.raises(PlannerError, match="num_hidden_layers"):
        attention_shape({"model_type": "t5", "d_model": 512})


def test_gpu_plan_side_by_side_on_a_24_gib_card() -> None:
    result = plan(config("Qwen3-8B"), max_model_len=32768, vram_total_bytes=24 * GIB,
                  gpu_memory_utilization=0.9, bandwidth_gbps=bandwidth_for("NVIDIA GeForce RTX 4090"))
    bf16, fp8 = result.row("auto"), result.row("fp8_e4m3")
    assert result.weights_estimated and "assumed" in result.assumption
    assert fp8.capacity_tokens == pytest.approx(2 * bf16.capacity_tokens, abs=16)
    assert bf16.kv_bytes_per_sequence == 32768 * 147_456
    assert fp8.floor_ms_per_token < bf16.floor_ms_per_token
    assert bf16.floor_ms_per_token == pytest.approx((result.weight_bytes + 32768 * 147_456) / 1008e9 * 1000)
    too_big = plan(config("QwQ-32B"), max_model_len=8192, vram_total_bytes=24 * GIB)
    assert not too_big.row("auto").fits and too_big.row("auto").capacity_tokens == 0


def test_bandwidth_table_matches_nvml_names() -> None:
    assert bandwidth_for("NVIDIA GeForce RTX 4070 Ti SUPER") == 672
    assert bandwidth_for("NVIDIA GeForce RTX 3060") == 360
    assert bandwidth_for("NVIDIA H100 80GB HBM3") == 3350
    assert bandwidth_for("NVIDIA L4") == 300
    assert bandwidth_for("Some Other Card") is None


def test_embedded_model_plan_reads_safetensors_headers() -> None:
    result = plan_for_folder(require_embedded_model(), max_model_len=2048, cpu_kv_pool_bytes=1 * GIB)
    assert not result.weights_estimated
    assert result.weight_bytes == pytest.approx(134.5e6 * 2, rel=0.01)
    assert result.row("auto").capacity_tokens == 46_592  # vLLM's own figure at 1 GiB
    assert result.row("fp8_e4m3").capacity_tokens == 93_184


@pytest.mark.real_engine
def test_planner_matches_the_real_engine_within_two_percent(real_engine) -> None:
    ready = real_engine.ready
    predicted = plan_for_folder(require_embedded_model(), max_model_len=ready.max_model_len,
                                cpu_kv_pool_bytes=int(real_engine.config.cpu_kv_cache_gib * GIB))
    assert predicted.row("auto").capacity_tokens == pytest.approx(ready.kv_capacity_tokens, rel=0.02)
    assert predicted.row("auto").max_concurrency == pytest.approx(ready.max_concurrency, rel=0.02)
