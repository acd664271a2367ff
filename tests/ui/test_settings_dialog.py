"""The settings dialog: generated from the schema, hardware limits with reasons, validation, apply/cancel."""

from __future__ import annotations

import json

from PySide6.QtWidgets import QDialogButtonBox, QMessageBox

from app.core.models.model_catalog import draft_pairing
from app.core.settings.settings import EngineConfig, LoopGuardConfig, Settings, load_settings
from app.engine.machine.capability import HardwareProbe
from app.engine.scripted import ScriptedEngineDouble
from app.ui.dialogs.settings_dialog import SettingsDialog

NO_AVX512 = HardwareProbe("cpu", "0.32.0", frozenset({"avx2"}))
AMX = HardwareProbe("cpu", "0.32.0", frozenset({"avx2", "avx512f", "amx_tile"}))


def make_dialog(qtbot, settings: Settings | None = None, probe: HardwareProbe = NO_AVX512) -> SettingsDialog:
    dialog = SettingsDialog(settings or Settings(), probe)
    qtbot.addWidget(dialog)
    return dialog


def button(dialog: SettingsDialog, which: QDialogButtonBox.StandardButton):
    return dialog.buttons.button(which)


def test_every_schema_field_has_an_editor(qtbot) -> None:
    dialog = make_dialog(qtbot)
    names = {name for _, name in dialog.editors}
    assert names == set(EngineConfig.model_fields) | {"temperature", "top_p", "top_k", "max_tokens",
                                                       "repetition_penalty", "think_budget", "thinking",
                                                       "reasoning_effort"} | set(LoopGuardConfig.model_fields)
    assert ("loop_guard", "action") in dialog.editors
    effort = dialog.editors[("sampling", "reasoning_effort")]  # gpt-oss's low / medium / high
    assert [effort.itemData(i) for i in range(effort.count())] == ["low", "medium", "high"]
    assert effort.currentData() == "medium"


def test_fp8_is_disabled_with_the_reason_on_a_cpu_without_avx512(qtbot) -> None:
    dialog = make_dialog(qtbot, Settings(engine=EngineConfig(kv_cache_dtype="fp8_e4m3")))
    combo = dialog.editors[("engine", "kv_cache_dtype")]
    items = {combo.itemData(i): combo.model().item(i) for i in range(combo.count())}
    assert not items["fp8_e4m3"].isEnabled() and "AVX-512" in items["fp8_e4m3"].toolTip()
    assert items["auto"].isEnabled()
    assert combo.currentData() == "auto", "an unsupported saved choice falls back to auto"
    assert "fp8_e4m3: FP8 KV cache on the CPU engine" in dialog.reasons.text()
    assert not dialog.editors[("engine", "gpu_memory_utilization")].isEnabled()


def test_fp8_is_offered_where_the_cpu_has_amx(qtbot) -> None:
    dialog = make_dialog(qtbot, probe=AMX)
    combo = dialog.editors[("engine", "kv_cache_dtype")]
    assert all(combo.model().item(i).isEnabled() for i in range(combo.count()))


def test_invalid_values_explain_themselves_and_block_apply(qtbot, tmp_path) -> None:
    dialog = make_dialog(qtbot)
    dialog.editors[("engine", "max_model_len")].setValue(100)
    assert not button(dialog, QDialogButtonBox.StandardButton.Ok).isEnabled()
    assert "greater than or equal to 256" in dialog.errors[("engine", "max_model_len")].text()
    dialog.editors[("engine", "max_model_len")].setValue(20_000)  # SmolLM2 stops at 8,192
    assert "at most 8,192 tokens" in dialog.errors[("engine", "max_model_len")].text()
    dialog.editors[("engine", "max_model_len")].setValue(4096)
    assert button(dialog, QDialogButtonBox.StandardButton.Apply).isEnabled()
    dialog.model_edit.setText(str(tmp_path / "missing"))
    assert "not a model folder" in dialog.errors[("engine", "model")].text()
    assert not button(dialog, QDialogButtonBox.StandardButton.Apply).isEnabled()


def test_planner_shows_bf16_and_fp8_side_by_side(qtbot) -> None:
    dialog = make_dialog(qtbot)
    text = dialog.planner_view.toPlainText()
    assert "bf16 (auto)" in text and "fp8_e4m3" in text
    assert "46,592 tokens" in text and "93,184 tokens" in text  # 1 GiB pool, the embedded model
    dialog.editors[("engine", "cpu_kv_cache_gib")].setValue(2.0)
    assert dialog.planner_view.plan.row("auto").capacity_tokens == 93_184
    assert "186,368 tokens" in dialog.planner_view.toPlainText()


def test_trust_remote_code_needs_a_confirmed_opt_in_per_model(qtbot, monkeypatch, tmp_path) -> None:
    dialog = make_dialog(qtbot)
    trust = dialog.editors[("engine", "trust_remote_code")]
    monkeypatch.setattr(QMessageBox, "warning", lambda *a, **k: QMessageBox.StandardButton.No)
    trust.setChecked(True)
    assert not trust.isChecked()
    monkeypatch.setattr(QMessageBox, "warning", lambda *a, **k: QMessageBox.StandardButton.Yes)
    trust.setChecked(True)
    assert trust.isChecked()
    dialog.model_edit.setText("Qwen/Qwen3-8B")
    assert not trust.isChecked(), "another model starts untrusted"


def test_apply_saves_and_restarts_the_engine_cancel_does_nothing(qtbot, make_window) -> None:
    engine = ScriptedEngineDouble()
    window = make_window(engine)
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    dialog = window.dialogs.open_settings()
    dialog.editors[("sampling", "temperature")].setValue(0.3)
    button(dialog, QDialogButtonBox.StandardButton.Apply).click()
    assert window.controller.settings.sampling.temperature == 0.3
    assert load_settings()[0].sampling.temperature == 0.3
    assert len(engine.starts) == 1, "a sampling change needs no restart"
    dialog.editors[("engine", "max_model_len")].setValue(1024)
    with qtbot.waitSignal(window.controller.bridge.engine_ready, timeout=5_000):
        button(dialog, QDialogButtonBox.StandardButton.Ok).click()
    assert [c.max_model_len for c in engine.starts] == [2048, 1024]
    saved = json.loads((load_settings.__globals__["settings_path"]()).read_text())
    assert saved["engine"]["max_model_len"] == 1024

    dialog = window.dialogs.open_settings()
    assert dialog.editors[("engine", "max_model_len")].value() == 1024, "the dialog shows the saved values"
    dialog.editors[("engine", "max_model_len")].setValue(3000)
    button(dialog, QDialogButtonBox.StandardButton.Cancel).click()
    assert window.controller.settings.engine.max_model_len == 1024 and len(engine.starts) == 2


def test_a_bad_loop_guard_threshold_is_marked_on_its_own_tab(qtbot) -> None:
    dialog = make_dialog(qtbot)
    dialog.editors[("loop_guard", "similarity")].setValue(1.5)
    assert dialog.candidate is None
    assert not dialog.errors[("loop_guard", "similarity")].isHidden()
    dialog.editors[("loop_guard", "similarity")].setValue(0.9)
    dialog.editors[("loop_guard", "action")].setCurrentIndex(dialog.editors[("loop_guard", "action")].findData("stop"))
    assert dialog.candidate is not None
    assert dialog.candidate.sampling.loop_guard.similarity == 0.9
    assert dialog.candidate.sampling.loop_guard.action == "stop"


def test_a_speculative_method_vllm_refused_is_greyed_out_with_its_reason(qtbot) -> None:
    """Bug caught: suffix decoding offered on an engine without arctic-inference (the start then fails), or
    the reason shown being Nalar's words rather than vLLM's; a saved refused choice falls back to off."""
    from app.engine.events import SpeculationVerdict

    refusal = "Arctic Inference is required for suffix decoding. Install via `pip install arctic-inference==0.1.1`."
    verdicts = (SpeculationVerdict("ngram", None), SpeculationVerdict("suffix", refusal),
                SpeculationVerdict("draft_model", None))
    dialog = SettingsDialog(Settings(engine=EngineConfig(speculative_method="suffix")), NO_AVX512,
                            speculation=verdicts)
    qtbot.addWidget(dialog)
    combo = dialog.editors[("engine", "speculative_method")]
    items = {combo.itemData(i): combo.model().item(i) for i in range(combo.count())}
    assert not items["suffix"].isEnabled() and items["suffix"].toolTip() == refusal
    assert items["ngram"].isEnabled() and items["draft_model"].isEnabled() and items["off"].isEnabled()
    assert combo.currentData() == "off"
    assert f"Speculative suffix: vLLM refuses it here: {refusal}" in dialog.reasons.text()
    assert "1.58× the answer tok/s" in dialog.reasons.text(), "the default and its figure are shown"


def test_before_any_engine_start_every_speculative_method_is_offered(qtbot) -> None:
    """Bug caught: methods greyed out with no verdict to go on (vLLM judges them at the engine's start)."""
    dialog = make_dialog(qtbot, Settings(engine=EngineConfig(speculative_method="ngram")))
    combo = dialog.editors[("engine", "speculative_method")]
    assert all(combo.model().item(i).isEnabled() for i in range(combo.count()))
    assert combo.currentData() == "ngram"
    assert "read when the local engine starts" in dialog.reasons.text()


def test_the_planner_shows_a_draft_models_weights_and_kv(qtbot) -> None:
    """Bug caught: a draft model's memory left out of "What fits" (its weights and its KV share the pool)."""
    from app.core.models.embedded_model import embedded_model_dir
    from app.core.models.planner import draft_cost

    dialog = make_dialog(qtbot, Settings(engine=EngineConfig(speculative_method="draft_model")))
    cost = draft_cost(embedded_model_dir(), 4096, "auto")
    text = dialog.planner_view.toPlainText()
    assert f"weights {cost.weight_bytes / (1 << 30):.2f} GiB" in text
    assert f"KV {cost.kv_bytes_per_token:,} bytes/token more" in text and "drafts for itself" in text
    assert cost.kv_bytes_per_token == dialog.planner_view.plan.row("auto").kv_bytes_per_token  # same model
    dialog.editors[("engine", "speculative_method")].setCurrentIndex(
        dialog.editors[("engine", "speculative_method")].findData("ngram"))
    assert "no extra weights or KV" in dialog.planner_view.toPlainText()


def test_the_planner_shows_the_catalogs_draft_before_it_is_downloaded(qtbot) -> None:
    """Bug caught: the pair's memory missing from "What fits" until the draft is downloaded. The 1.5B
    distill's KV: 28 layers × 2 KV heads × 128 dims × K and V × 1 byte at FP8 = 14,336 bytes a token."""
    from tests.support.downloads import R1_7B, fake_download

    target = fake_download(R1_7B)
    dialog = make_dialog(qtbot, Settings(engine=EngineConfig(model=str(target), speculative_method="draft_model",
                                                             kv_cache_dtype="fp8_e4m3", max_model_len=8192)),
                         AMX)  # FP8 KV offered (a CPU without AVX-512 plans bf16)
    text = " ".join(dialog.planner_view.toPlainText().split())
    assert "Draft model DeepSeek-R1-Distill-Qwen-1.5B, the catalog's pair (not downloaded yet" in text
    assert "KV 14,336 bytes/token more" in text and f"weights {3.55e9 / (1 << 30):.2f} GiB" in text
    assert "use_heterogeneous_vocab" in text
    assert draft_pairing("Qwen/QwQ-32B-AWQ") is None, "the catalog pairs QwQ with nothing"
