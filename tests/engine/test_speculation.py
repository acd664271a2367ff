"""Speculative decoding's decisions: vLLM's config for each method, vLLM's own verdict on it, the start's
refusal of a method vLLM refuses, and vLLM's spec-decode counters carried to a reply's Metrics."""

from __future__ import annotations

import importlib.util

import pytest

from app.core.models.embedded_model import embedded_model_dir
from app.core.models.model_catalog import R1_DRAFT
from app.core.settings.settings import EngineConfig, Settings, load_settings, save_settings
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import SpecDecodeFigures, SpeculationVerdict, StartPlan
from app.engine.local.engine_start import LocalStart, engine_arguments
from app.engine.local.kv_stats import KvStats, stat_logger_class
from app.engine.machine import speculation
from app.engine.reply.stream import ReplyStream
from tests.support.downloads import R1_7B, fake_download

MODEL = str(embedded_model_dir())
HAS_ARCTIC = importlib.util.find_spec("arctic_inference") is not None


def kwargs_for(config: EngineConfig) -> dict:
    return engine_arguments(StartPlan(config), MODEL, on_cpu=True, kv_block_size=None)


def test_each_method_becomes_vllms_speculative_config() -> None:
    """Bug caught: the n-gram lookup bounds or the draft model not reaching vLLM (vLLM then silently uses its
    own defaults, 5 and 5, or refuses a draft config without a model)."""
    config = EngineConfig(speculative_method="ngram", num_speculative_tokens=3, prompt_lookup_max=5,
                          prompt_lookup_min=1)
    assert kwargs_for(config)["speculative_config"] == {
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 5, "prompt_lookup_min": 1}
    assert "speculative_config" not in kwargs_for(EngineConfig())
    draft = speculation.speculative_config(EngineConfig(speculative_method="draft_model"), MODEL)
    assert draft == {"method": "draft_model", "num_speculative_tokens": 4, "model": MODEL}
    paired = EngineConfig(speculative_method="draft_model", draft_model="/models/small")
    assert speculation.speculative_config(paired, MODEL)["model"] == "/models/small"
    assert speculation.speculative_config(EngineConfig(speculative_method="suffix"), MODEL) == {"method": "suffix"}


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8_e4m3"])
def test_vllms_own_validation_judges_each_method_on_the_embedded_model(kv_cache_dtype: str) -> None:
    """Bug caught: a method greyed out (or offered) by a rule of Nalar's instead of vLLM's: here vLLM's
    create_engine_config runs with the real model config and KV dtype, and its text is the reason."""
    config = EngineConfig(kv_cache_dtype=kv_cache_dtype)
    verdicts = {v.method: v for v in speculation.judge_methods(config, MODEL, kwargs_for(config))}
    assert set(verdicts) == {"ngram", "suffix", "draft_model"}
    assert verdicts["ngram"].works and verdicts["draft_model"].works
    if HAS_ARCTIC:
        assert verdicts["suffix"].works
    else:
        assert verdicts["suffix"].reason is not None and "arctic-inference" in verdicts["suffix"].reason


def test_vllms_refusal_of_bad_ngram_bounds_is_its_own_text() -> None:
    """Bug caught: a wrong n-gram window (min above max) reaching the engine build, which fails after the
    weights load with a RuntimeError; vLLM's validation names it first."""
    config = EngineConfig(speculative_method="ngram", prompt_lookup_min=6, prompt_lookup_max=3)
    spec = speculation.speculative_config(config, MODEL)
    assert spec is not None
    reason = speculation.judge_method(kwargs_for(EngineConfig()), spec)
    assert reason is not None and "prompt_lookup_min=6 must be <= prompt_lookup_max=3" in reason


def test_a_start_with_a_refused_method_fails_with_vllms_reason_and_offers_off(monkeypatch) -> None:
    """Bug caught: a refused method failing deep inside the engine build with 'Engine core initialization
    failed'; the start must stop first, say vLLM's reason, and offer speculation off as the retry."""
    monkeypatch.setattr(speculation, "judge_method",
                        lambda kwargs, spec: "Arctic Inference is required for suffix decoding."
                        if spec["method"] == "suffix" else None)
    config = EngineConfig(speculative_method="suffix")
    with pytest.raises(EngineFailure) as caught:
        LocalStart._judge_speculation(config, MODEL, kwargs_for(config))
    failure = caught.value
    assert failure.kind is FailureKind.SPECULATION_UNSUPPORTED
    assert "Arctic Inference is required" in failure.message and "arctic-inference" in failure.fix
    assert failure.fallback.applied_to(config).speculative_method == "off"
    verdicts = LocalStart._judge_speculation(EngineConfig(speculative_method="ngram"), MODEL, kwargs_for(config))
    assert SpeculationVerdict("suffix", "Arctic Inference is required for suffix decoding.") in verdicts


def test_spec_counters_from_vllms_stats_reach_the_reply_metrics() -> None:
    """Bug caught: the acceptance gauge showing the engine's counts since it started (another reply's) or
    nothing, because vLLM's SchedulerStats.spec_decoding_stats was not read in the stat logger."""
    from vllm.v1.metrics.stats import SchedulerStats
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    stats = KvStats()
    logger = stat_logger_class(stats)(None)

    def step(proposals: list[tuple[int, int]]) -> None:
        spec = SpecDecodingStats.new(4)
        for drafted, accepted in proposals:
            spec.observe_draft(drafted, accepted)
        logger.record(SchedulerStats(spec_decoding_stats=spec), None)

    step([(4, 4), (4, 0)])  # an earlier reply's steps
    stream = ReplyStream("r", kv=stats.figures)
    assert stream.metrics().speculation == SpecDecodeFigures()  # the reply's first metrics: nothing of its own
    step([(4, 3)])
    step([(4, 1), (4, 2)])
    figures = stream.metrics().speculation
    assert figures == SpecDecodeFigures(drafts=3, draft_tokens=12, accepted_tokens=6)
    assert figures.acceptance_rate == pytest.approx(0.5) and figures.mean_accepted_length == pytest.approx(3.0)
    assert ReplyStream("plain", kv=KvStats().figures).metrics().speculation is None


def test_speculation_settings_round_trip(tmp_path) -> None:
    """Bug caught: a speculation field missing from the schema's JSON (the engine would start without it)."""
    settings = Settings().with_engine(speculative_method="draft_model", draft_model="/m/draft",
                                      num_speculative_tokens=6, prompt_lookup_max=7, prompt_lookup_min=3)
    path = tmp_path / "settings.json"
    save_settings(settings, path)
    loaded, notice = load_settings(path)
    assert notice is None and loaded.engine == settings.engine
    assert Settings().engine.speculative_method == "off"


def test_the_catalog_pairs_the_r1_distills_with_the_small_distill_and_vllm_accepts_the_pair() -> None:
    """Bug caught: the catalog's pair sent as vLLM refuses it. The 1.5B distill's vocabulary has 151,936 rows
    and the 7B's 152,064 for one tokenizer; vLLM's own validation (run here on the shipped configs, FP8 KV)
    refuses that unless use_heterogeneous_vocab maps the tokens. Also: the pair used before it is downloaded."""
    target = fake_download(R1_7B)
    config = EngineConfig(speculative_method="draft_model", kv_cache_dtype="fp8_e4m3")
    assert speculation.speculative_config(config, str(target))["model"] == str(target), "no draft here yet"
    draft = fake_download(R1_DRAFT)
    spec = speculation.speculative_config(config, str(target))
    assert spec == {"method": "draft_model", "num_speculative_tokens": 4, "model": str(draft),
                    "use_heterogeneous_vocab": True}
    assert speculation.speculative_config(EngineConfig(speculative_method="draft_model"), MODEL)["model"] == MODEL
    engine = {"model": str(target), "tokenizer": MODEL, "skip_tokenizer_init": True, "max_model_len": 4096,
              "kv_cache_dtype": "fp8_e4m3"}
    assert speculation.judge_method(engine, spec) is None
    plain = {k: v for k, v in spec.items() if k != "use_heterogeneous_vocab"}
    assert "same vocabulary size" in (speculation.judge_method(engine, plain) or "")
