"""The FP8 scales a model runs with are said where the KV cache is shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.measure.fp8_scales import fp8_scales_text
from app.core.settings.settings import EngineConfig, Settings
from app.engine.events import EngineReady
from app.engine.machine import capability
from app.ui.chat.gauges import GaugeBar


def folder(tmp_path: Path, quantization: dict | None) -> Path:
    config = {"model_type": "qwen2"} | ({"quantization_config": quantization} if quantization else {})
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_uncalibrated_calibrated_and_awq_are_told_apart(tmp_path: Path) -> None:
    """Bug caught: every catalog GPU model (AWQ) ran fp8 at scale 1.0 and only vLLM's log, which no one
    reads, said so."""
    (tmp_path / "a").mkdir()
    plain = fp8_scales_text("fp8_e4m3", folder(tmp_path / "a", None))
    assert plain.startswith("fp8, scales 1.0 (uncalibrated)") and "nalar kv-check --engine" in plain
    (tmp_path / "b").mkdir()
    calibrated = fp8_scales_text("fp8_e4m3", folder(tmp_path / "b", {"quant_method": "compressed-tensors",
                                                                    "kv_cache_scheme": {"num_bits": 8}}))
    assert calibrated.startswith("fp8, calibrated scales")
    (tmp_path / "c").mkdir()
    awq = fp8_scales_text("fp8_e4m3", folder(tmp_path / "c", {"quant_method": "awq", "bits": 4}))
    assert "scales 1.0 (uncalibrated)" in awq and "AWQ" in awq and "can't be calibrated" in awq
    assert fp8_scales_text("auto", tmp_path / "c") == ""


def test_the_kv_gauge_tooltip_says_the_scales(qtbot, tmp_path: Path) -> None:
    gauges = GaugeBar()
    qtbot.addWidget(gauges)
    gauges.set_engine(EngineReady(str(folder(tmp_path, {"quant_method": "awq"})), "fp8_e4m3", 4096, 10_000, 2.4, 1.0))
    assert gauges.kv_bar.toolTip().startswith("fp8, scales 1.0 (uncalibrated)")
    gauges.set_engine(EngineReady(str(tmp_path), "auto", 4096, 5_000, 1.2, 1.0))
    assert "scales" not in gauges.kv_bar.toolTip()


def test_the_settings_planner_says_the_scales(qtbot, make_window) -> None:
    if capability.kv_dtype_unsupported_reason("fp8_e4m3", capability.probe_hardware()):
        pytest.skip("this machine can't run fp8 (no AVX-512 or AMX): the dialog offers only 'auto'")
    window = make_window(None, Settings(engine=EngineConfig(kv_cache_dtype="fp8_e4m3")))
    dialog = window.dialogs.open_settings()
    assert "scales 1.0 (uncalibrated)" in dialog.planner_view.toPlainText()
    dialog.reject()
