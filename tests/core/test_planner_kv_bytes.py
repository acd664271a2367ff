"""The planner's KV bytes per element, held to what torch and vLLM store (issue 39, item 12)."""

from __future__ import annotations

import pytest

from app.core.models.planner import KV_ELEMENT_BYTES, attention_shape, plan

# SmolLM2-135M's attention: 30 layers, 3 KV heads of 64.
CONFIG = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
          "intermediate_size": 1536, "vocab_size": 49152, "max_position_embeddings": 8192}


def test_fp8_e5m2_stores_one_byte_per_element_as_torch_does() -> None:
    """Bug caught: fp8_e5m2 planned at two bytes per element (as bf16), so the plan showed half the context
    an E5M2 cache holds and the CPU pool was sized twice too large for it."""
    torch = pytest.importorskip("torch")
    stored = {"auto": torch.bfloat16, "bfloat16": torch.bfloat16, "float16": torch.float16,
              "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
    assert set(KV_ELEMENT_BYTES) == set(stored)
    for dtype, torch_dtype in stored.items():
        assert KV_ELEMENT_BYTES[dtype] == torch.empty(0, dtype=torch_dtype).element_size(), dtype
    assert attention_shape(CONFIG).kv_bytes_per_token("fp8_e5m2") == 2 * 30 * 3 * 64 * 1


def test_an_e5m2_plan_holds_the_same_tokens_as_e4m3_and_twice_bf16s() -> None:
    """Bug caught (the same, seen in the plan): the E5M2 row's per-token bytes and fitting context."""
    result = plan(CONFIG, max_model_len=8192, kv_dtypes=("auto", "fp8_e4m3", "fp8_e5m2"), cpu_kv_pool_bytes=1 << 30)
    auto, e4m3, e5m2 = (result.row(d) for d in ("auto", "fp8_e4m3", "fp8_e5m2"))
    assert e5m2.kv_bytes_per_token == e4m3.kv_bytes_per_token == auto.kv_bytes_per_token // 2
    assert e5m2.kv_bytes_per_sequence == auto.kv_bytes_per_sequence // 2
