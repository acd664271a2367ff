"""The gauges' engine line: which backend answers, the KV dtype of a local one, and its start plan."""

from __future__ import annotations

from app.core.settings.settings import EngineConfig
from app.engine.events import EngineReady, StartPlan
from app.ui.chat.gauges import GaugeBar


def test_a_remote_engine_is_not_shown_as_a_kv_dtype(qtbot) -> None:
    """Bug caught: the remote backend set kv_cache_dtype to "remote", so the gauge read "KV cache (remote)" as
    if that were a dtype, and the fp8 and headroom lookups were asked about a dtype called "remote"."""
    gauges = GaugeBar()
    qtbot.addWidget(gauges)
    gauges.set_engine(EngineReady("gpu-box: qwen3", "", 32_768, 0, 0.0, 0.4, backend="remote"))
    assert gauges.kv_label.text() == "KV cache (on the server)" and gauges.kv_cache_dtype is None
    gauges.set_engine(EngineReady("m", "fp8_e4m3", 4096, 10_000, 2.4, 1.0))
    assert gauges.kv_label.text() == "KV cache (fp8_e4m3)" and gauges.kv_cache_dtype == "fp8_e4m3"


def test_the_kv_tooltip_shows_what_this_start_runs_with(qtbot) -> None:
    """Bug caught: a start fitted to the VRAM free now (a smaller share and context) said so only in the log."""
    gauges = GaugeBar()
    qtbot.addWidget(gauges)
    plan = StartPlan(EngineConfig(max_model_len=12_288, gpu_memory_utilization=0.7), "FLASH_ATTN", True,
                     ("Other programs use 3.0 GiB of VRAM: starting with 70% instead of 90%.",))
    gauges.set_engine(EngineReady("m", "auto", 12_288, 40_000, 3.2, 9.0, plan=plan))
    tip = gauges.kv_bar.toolTip()
    assert "This start: KV cache auto, context 12,288 tokens, attention FLASH_ATTN, FlashInfer sampler." in tip
    assert "starting with 70% instead of 90%" in tip
    gauges.set_engine(None)
    assert "This start" not in gauges.kv_bar.toolTip()
