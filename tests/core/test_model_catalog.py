"""The first-run catalog: recommendations come from the planner and the shipped configs, offline."""

from __future__ import annotations

import pytest

from app.core.models.model_catalog import CATALOG, MIN_CONTEXT, best, plan_model, recommendations, validate_model_folder
from app.core.models.planner import GIB, attention_shape, plan
from app.core.settings import paths
from tests.conftest import require_embedded_model

MIB = 1 << 20


@pytest.mark.parametrize(("vram_mib", "expected"), [
    (8188, "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"),  # what NVML reports for 8 GB cards
    (12282, "casperhansen/deepseek-r1-distill-qwen-7b-awq"),
    (16376, "casperhansen/deepseek-r1-distill-qwen-14b-awq"),
    # RTX 4090: QwQ-32B-AWQ's 18.4 GiB of weights leave under 8k tokens once vLLM's profile terms
    # (activations, CUDA context and graphs) are counted (issue 24, item 6); gpt-oss-20b's 12.8 GiB fit.
    (24564, "openai/gpt-oss-20b"),
    (4096, None),  # nothing fits: the embedded model is the choice
])
def test_the_planner_picks_the_largest_model_that_fits(vram_mib: int, expected: str | None) -> None:
    choice = best(recommendations(vram_mib * MIB))
    assert (choice.model.repo_id if choice else None) == expected


def test_each_entry_shows_the_planners_fit_and_max_context_at_fp8_and_bf16() -> None:
    vram = 16376 * MIB
    for rec in recommendations(vram):
        config = rec.model.config()
        attention_shape(config)  # a shipped config the planner understands
        direct = plan(config, weight_bytes=rec.model.weight_bytes, max_model_len=MIN_CONTEXT,
                      kv_dtypes=("fp8_e4m3", "auto"), vram_total_bytes=vram,
                      gpu_memory_utilization=rec.model.gpu_memory_utilization)
        limit = config["max_position_embeddings"]
        assert rec.max_context == {row.kv_cache_dtype: min(row.capacity_tokens, limit) for row in direct.rows}
        # FP8 halves the KV bytes per token: twice the context wherever the model's own limit allows.
        assert rec.max_context["fp8_e4m3"] >= rec.max_context["auto"]
        assert f"{rec.max_context['fp8_e4m3']:,} tokens at fp8" in rec.summary()
        assert f"{rec.max_context['auto']:,} at bf16" in rec.summary()
    fourteen = plan_model(CATALOG[2], vram)
    assert fourteen.fits and 2 * fourteen.max_context["auto"] - fourteen.max_context["fp8_e4m3"] < 64
    assert fourteen.recommended_context("fp8_e4m3") == min(fourteen.max_context["fp8_e4m3"], 32768)
    assert "too big" in plan_model(next(m for m in CATALOG if m.repo_id == "Qwen/QwQ-32B-AWQ"), vram).summary()
    assert fourteen.model.weight_bytes / GIB < vram / GIB


def test_resources_are_found_without_an_editable_install() -> None:
    folder = paths.resources_dir()
    assert (folder / "nalar.svg").is_file()
    assert all((folder / "model_configs" / f"{m.config_name}.json").is_file() for m in CATALOG)


def test_local_folder_validation_names_the_problem(tmp_path) -> None:
    assert validate_model_folder(require_embedded_model()) is None
    assert "missing does not exist" in validate_model_folder(tmp_path / "missing")
    assert "no config.json" in validate_model_folder(tmp_path)
    (tmp_path / "config.json").write_text("{broken")
    assert "is broken" in validate_model_folder(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    message = validate_model_folder(tmp_path)
    assert "no .safetensors" in message and "pytorch_model.bin" in message


def test_gpt_oss_20b_is_planned_on_its_full_attention_layers_and_fits_from_24_gib() -> None:
    """Bug caught: gpt-oss's 12 sliding-window layers (128 tokens) counted as full attention, which doubles its
    KV per token (vLLM's hybrid manager pages them apart), or the catalog promising it on a 16 GB card where
    its 12.8 GiB of MXFP4 weights and vLLM's profile terms exceed the 95 % share."""
    model = next(m for m in CATALOG if m.repo_id == "openai/gpt-oss-20b")
    shape = attention_shape(model.config())
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (12, 8, 64)
    assert shape.kv_bytes_per_token("auto") == 2 * 12 * 8 * 64 * 2 == 24576
    assert shape.kv_bytes_per_token("fp8_e4m3") == 12288
    assert "12 of 24 layers attend over a 128-token window" in shape.note
    assert not plan_model(model, 16376 * MIB).fits
    big = plan_model(model, 24564 * MIB)
    assert big.fits and big.max_context["auto"] == 131072, "the model's own limit caps it on a 24 GB card"
