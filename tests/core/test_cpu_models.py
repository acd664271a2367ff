"""The CPU catalog: small real reasoning models, sized by RAM with the planner, speed from measured bandwidth.

No engine here: the arithmetic the welcome dialog shows, checked against independent counts (the embedded
model's safetensors header, the published weight sizes) and against what EngineConfig accepts.
"""

from __future__ import annotations

import pytest

from app.core.models import cpu_catalog
from app.core.models.cpu_catalog import (
    CPU_CATALOG,
    CPU_CONTEXT,
    RUNTIME_OVERHEAD_BYTES,
    MemoryBandwidth,
    best_cpu,
    cpu_recommendations,
    kv_pool_bytes,
    plan_cpu_model,
)
from app.core.models.model_catalog import MIN_CONTEXT
from app.core.models.model_families import model_family
from app.core.models.planner import (
    GIB,
    attention_shape,
    bytes_read_per_token,
    estimate_weight_bytes,
    load_model_config,
    read_safetensors_weight_bytes,
)
from app.core.settings.settings import EngineConfig
from tests.conftest import require_embedded_model

BANDWIDTH = MemoryBandwidth(20.0, True)


def by_label(recs: list) -> dict:
    return {rec.model.label: rec for rec in recs}


def test_the_cpu_models_are_real_reasoning_models_with_their_familys_think_and_sampling() -> None:
    """Bugs caught: a CPU entry whose family is matched wrongly (a Qwen3 without its Think switch, an R1
    distill without its parser or with the system prompt it must not get), or a plain non-thinking model."""
    families = {model.label: model_family(model.repo_id, model.config()["model_type"]) for model in CPU_CATALOG}
    assert set(families) == {"Qwen3-0.6B", "Qwen3-1.7B", "DeepSeek-R1-Distill-Qwen-1.5B"}
    for label in ("Qwen3-0.6B", "Qwen3-1.7B"):
        family = families[label]
        assert (family.thinking, family.parser) == ("hybrid", "qwen3")
        assert family.sampling(True) is not None and family.sampling(True).top_k == 20
        assert family.sampling(False).temperature == 0.7, "Qwen3's card: 0.7 with thinking off"
    r1 = families["DeepSeek-R1-Distill-Qwen-1.5B"]
    assert (r1.thinking, r1.parser, r1.system_prompt) == ("always", "deepseek_r1", False)
    # Downloaded folders are named <owner>--<name>: the family must still be found from the folder.
    assert model_family("/cache/models/Qwen--Qwen3-0.6B").name == "Qwen3"


@pytest.mark.parametrize("model", CPU_CATALOG, ids=lambda m: m.label)
def test_the_shipped_configs_match_the_published_weights(model) -> None:
    """The planner sizes a model offline from its shipped config.json. Bug caught: a config that is not the
    model's (wrong hidden size, layers, vocabulary), which would put wrong RAM and speed figures on screen.
    The published safetensors hold every tensor once (Qwen3 stores its tied lm_head too)."""
    config = model.config()
    stored = estimate_weight_bytes({**config, "tie_word_embeddings": False})
    assert abs(stored - model.weight_bytes) / model.weight_bytes < 0.01, (stored, model.weight_bytes)
    assert config["max_position_embeddings"] >= CPU_CONTEXT


def test_bytes_read_per_token_matches_the_embedded_models_real_tensors() -> None:
    """External truth: the embedded model's safetensors header. Its embeddings are tied, so a decode step reads
    every weight (the table is the output layer too); the planner's count must agree within the norms it
    leaves out. Bug caught: a speed figure built on a wrong byte count."""
    folder = require_embedded_model()
    config = load_model_config(folder)
    assert config["tie_word_embeddings"] is True
    real = read_safetensors_weight_bytes(folder)
    counted = bytes_read_per_token(config, context_tokens=0, kv_dtype="auto")
    assert abs(counted - real) / real < 0.01, (counted, real)
    kv = attention_shape(config).kv_bytes_per_token("fp8_e4m3")
    assert bytes_read_per_token(config, context_tokens=1000, kv_dtype="fp8_e4m3") == counted + 1000 * kv
    # Untied (the R1 distill): one row of the input table is read, not the table.
    r1 = next(m for m in CPU_CATALOG if "R1" in m.label).config()
    table = r1["vocab_size"] * r1["hidden_size"] * 2
    assert bytes_read_per_token(r1, context_tokens=0, kv_dtype="auto") == estimate_weight_bytes(r1) - table


def test_sized_by_ram_weights_pool_and_runtime_with_the_context_that_fits() -> None:
    """Bugs caught: a model offered where it can't load (8 GiB: Qwen3-1.7B's 3.8 GiB of weights, its pool and
    the runtime exceed 80 % of RAM); a KV pool smaller than the context set (vLLM refuses to start: the pool
    must hold one whole conversation); a context cut without need."""
    eight = by_label(cpu_recommendations(8 * GIB, "fp8_e4m3", BANDWIDTH))
    assert [label for label, rec in eight.items() if rec.fits] == ["Qwen3-0.6B", "DeepSeek-R1-Distill-Qwen-1.5B"]
    small = eight["Qwen3-0.6B"]
    config = small.model.config()
    per_token = attention_shape(config).kv_bytes_per_token("fp8_e4m3")
    assert small.context == CPU_CONTEXT and small.kv_pool_bytes >= per_token * CPU_CONTEXT
    assert small.kv_pool_bytes - per_token * CPU_CONTEXT < GIB / 64, "rounded up to the setting's unit only"
    assert small.need_bytes == small.model.weight_bytes + small.kv_pool_bytes + RUNTIME_OVERHEAD_BYTES
    assert "too big" in eight["Qwen3-1.7B"].summary() and "fits" in small.summary()
    # Between the two: 16k of context doesn't fit beside the weights, 8k does.
    tight = plan_cpu_model(small.model, int((small.need_bytes - 0.3 * GIB) / 0.8), "fp8_e4m3", BANDWIDTH)
    assert tight.fits and tight.context == MIN_CONTEXT
    assert tight.kv_pool_bytes == kv_pool_bytes(config, "fp8_e4m3", MIN_CONTEXT)
    # bf16 KV doubles the pool.
    assert plan_cpu_model(small.model, 8 * GIB, "auto", BANDWIDTH).kv_pool_bytes == 2 * small.kv_pool_bytes
    assert best_cpu(cpu_recommendations(4 * GIB, "fp8_e4m3", BANDWIDTH)) is None, "4 GiB: the embedded model"
    for rec in eight.values():
        EngineConfig.model_validate({"model": "/m", "kv_cache_dtype": "fp8_e4m3", **rec.engine_update()})


def test_tok_s_is_bandwidth_over_bytes_per_token_and_the_pick_follows_it() -> None:
    """Bugs caught: a speed that is not bandwidth ÷ bytes (a guess), and a recommendation of the biggest model
    that fits even where it would crawl."""
    recs = by_label(cpu_recommendations(24 * GIB, "fp8_e4m3", BANDWIDTH))
    for rec in recs.values():
        assert rec.tokens_per_s == pytest.approx(20e9 / rec.bytes_per_token)
        assert f"up to {rec.tokens_per_s:.0f} tok/s" in rec.summary() and "20.0 GB/s measured" in rec.summary()
    assert recs["Qwen3-0.6B"].tokens_per_s > 2 * recs["Qwen3-1.7B"].tokens_per_s
    assert best_cpu(list(recs.values())).model.label == "Qwen3-1.7B", "20 GB/s: 1.7B still reaches 5 tok/s"
    slow = cpu_recommendations(24 * GIB, "fp8_e4m3", MemoryBandwidth(6.0, True))
    assert best_cpu(slow).model.label == "Qwen3-0.6B", "6 GB/s: only the smallest is quick enough"
    crawling = cpu_recommendations(24 * GIB, "fp8_e4m3", MemoryBandwidth(1.0, True))
    assert best_cpu(crawling).model.label == "Qwen3-0.6B", "none reaches 5 tok/s: the fastest that fits"


def test_bandwidth_is_measured_once_or_the_stored_default_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bugs caught: a failed measurement that crashes the first-run dialog, or an assumed figure shown as if
    it were measured."""
    from app.core.models import planner

    cpu_catalog.host_bandwidth.cache_clear()

    def no_memory(**_kwargs: object) -> float:
        raise MemoryError("256 MiB not available")

    monkeypatch.setattr(planner, "measure_host_bandwidth_gbps", no_memory)
    try:
        assumed = cpu_catalog.host_bandwidth()
        assert assumed == MemoryBandwidth(cpu_catalog.DEFAULT_BANDWIDTH_GBPS, False)
        assert "assumed" in assumed.describe() and "GB/s measured" not in assumed.describe()
    finally:
        cpu_catalog.host_bandwidth.cache_clear()
    monkeypatch.undo()
    measured = cpu_catalog.host_bandwidth()
    assert measured.measured and measured.gbps > 0 and cpu_catalog.host_bandwidth() is measured
