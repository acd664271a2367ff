"""Rehearsal of vLLM 0.32's speculative-decoding validation for a CUDA card, on a CPU machine.

vLLM's own ``EngineArgs.create_speculative_config`` (SpeculativeConfig, and the draft model's ModelConfig)
runs with the current platform reporting CUDA at compute capability 8.9 (an RTX 4090) and FP8 KV, so what a
gaming PC's first start would accept or refuse is known before one exists. SpeculativeConfig reads no
platform itself today; faking the device keeps the rehearsal true if a release makes it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.core.models.embedded_model import embedded_model_dir
from app.core.settings.settings import EngineConfig
from app.engine.machine import speculation

MODEL = str(embedded_model_dir())


@pytest.fixture
def cuda_platform(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """The target's ModelConfig built first, on the real (CPU) platform: inspecting the architecture imports
    the model's layers, which on a faked CUDA would import vLLM's CUDA-only flash-attention extension."""
    import vllm.platforms as platforms
    from vllm import AsyncEngineArgs
    from vllm.platforms.interface import DeviceCapability, PlatformEnum

    target = AsyncEngineArgs(model=MODEL, kv_cache_dtype="fp8_e4m3", max_model_len=2048).create_model_config()

    platform = type(platforms.current_platform)
    for name, value in dict(_enum=PlatformEnum.CUDA, device_type="cuda", device_name="cuda",
                            dispatch_key="CUDA").items():
        monkeypatch.setattr(platform, name, value, raising=False)
    monkeypatch.setattr(platform, "get_device_capability",
                        classmethod(lambda cls, device_id=0: DeviceCapability(8, 9)), raising=False)
    assert platforms.current_platform.is_cuda() and not platforms.current_platform.is_cpu()
    yield target


def cuda_verdict(target: object, method: str) -> str | None:
    from vllm import AsyncEngineArgs
    from vllm.config import ParallelConfig

    config = EngineConfig(kv_cache_dtype="fp8_e4m3", speculative_method=method)  # type: ignore[arg-type]
    spec = speculation.speculative_config(config, MODEL)
    assert spec is not None
    args = AsyncEngineArgs(model=MODEL, kv_cache_dtype="fp8_e4m3", max_model_len=2048, speculative_config=spec)
    try:
        args.create_speculative_config(target, ParallelConfig())  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - vLLM's refusal is the result
        return speculation.vllm_reason(exc)
    return None


@pytest.mark.parametrize("method", ["ngram", "draft_model"])
def test_vllm_accepts_ngram_and_a_draft_model_with_fp8_kv_on_an_rtx_4090(cuda_platform, method: str) -> None:
    """Bug caught: Nalar's config for a method (its keys, the draft model) being one vLLM refuses on the
    card it is meant for, found only at a user's first GPU start."""
    assert cuda_verdict(cuda_platform, method) is None


def test_suffix_on_cuda_needs_only_the_arctic_inference_package(cuda_platform, monkeypatch) -> None:
    """Bug caught: suffix greyed out on a GPU for a reason other than the missing package (the fix shown
    would then not fix it): without arctic-inference vLLM names the package; with it, it accepts suffix."""
    from vllm.config import speculative as vllm_speculative

    monkeypatch.setattr(vllm_speculative, "has_arctic_inference", lambda: False)
    reason = cuda_verdict(cuda_platform, "suffix")
    assert reason is not None and "arctic-inference" in reason
    monkeypatch.setattr(vllm_speculative, "has_arctic_inference", lambda: True)
    assert cuda_verdict(cuda_platform, "suffix") is None
