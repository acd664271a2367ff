"""`nalar doctor --gpu`: the CUDA engine's first-start checklist, each failing item with its fix.

Driver, CUDA build, GPU and compute capability, free VRAM, FlashInfer kernels, C compiler and
Python.h: what vLLM 0.32's first start on a gaming PC needs (see app.engine.machine.gpu_start). Nothing
here creates a CUDA context.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from app.core.models.planner import GIB, utilization_for_free_vram
from app.core.settings.settings import load_settings
from app.engine.machine import capability, gpu_start
from app.engine.machine.capability import HardwareProbe
from app.engine.machine.gpu_start import APT_DRIVER, APT_TOOLCHAIN, Toolchain


@dataclass(frozen=True)
class CheckItem:
    name: str
    ok: bool
    detail: str
    fix: str = ""  # set when not ok


def checklist(probe: HardwareProbe, tools: Toolchain, driver: tuple[int, int] | None,
              torch_cuda: tuple[int, int] | None, gpu_memory_utilization: float,
              kv_cache_dtype: str = "fp8_e4m3") -> list[CheckItem]:
    items: list[CheckItem] = []
    if driver is None:
        items.append(CheckItem("NVIDIA driver", False, "NVML found no NVIDIA driver.", f"Install one: {APT_DRIVER}."))
    else:
        problem = gpu_start.driver_problem(driver, torch_cuda)
        items.append(CheckItem("NVIDIA driver", problem is None, f"supports CUDA {driver[0]}.{driver[1]}"
                               + (f" ({problem.message})" if problem else ""), problem.fix if problem else ""))
    if torch_cuda is None:
        items.append(CheckItem("CUDA build", False, "the installed torch is a CPU build",
                               "Set up the GPU engine: NALAR_ENGINE=gpu make"))
    else:
        items.append(CheckItem("CUDA build", True, f"torch built for CUDA {torch_cuda[0]}.{torch_cuda[1]}"))
    gpu = probe.gpus[0] if probe.gpus else None
    if gpu is None:
        items.append(CheckItem("GPU", False, "no NVIDIA GPU answered NVML", "Check the driver (nvidia-smi)."))
    else:
        major, minor = gpu.compute_capability
        items.append(CheckItem("GPU", (major, minor) >= (8, 0),
                               f"{gpu.name}, compute capability {major}.{minor}",
                               "" if (major, minor) >= (8, 0) else "Nalar's GPU engine needs compute capability 8.0+ "
                                                                   "(RTX 30xx or newer)."))
        share = utilization_for_free_vram(gpu_memory_utilization, gpu.vram_free_bytes, gpu.vram_total_bytes)
        held = (gpu.vram_total_bytes - gpu.vram_free_bytes) / GIB
        detail = (f"{gpu.vram_free_bytes / GIB:.1f} of {gpu.vram_total_bytes / GIB:.1f} GiB free (other programs "
                  f"use {held:.1f} GiB); memory share {gpu_memory_utilization:.0%}")
        enough = share >= gpu_memory_utilization
        items.append(CheckItem("free VRAM", enough,
                               detail if enough else f"{detail}: the engine starts with {share:.0%}",
                               "" if enough else "Close programs that use the GPU (browser, games, Steam) for the "
                                                 "full share, or lower it in Settings."))
    kernels_detail = tools.kernels or ("none downloaded; nvcc and ninja can build them" if tools.can_build_kernels
                                       else "none downloaded, and no nvcc and ninja to build them")
    refusal = (capability.judge_kv_dtype(kv_cache_dtype, probe, kernels=tools.has_kernels).reason
               if gpu is not None and not tools.has_kernels else None)
    items.append(CheckItem("FlashInfer kernels", tools.has_kernels,
                           kernels_detail + (f". {refusal}" if refusal else
                                             "" if tools.has_kernels else ". The sampler falls back to PyTorch's."),
                           "" if tools.has_kernels else "Run .venv/bin/vllm download-kernels"))
    items.append(CheckItem("C compiler", bool(tools.c_compiler), tools.c_compiler or "none on PATH (cc, gcc, clang)",
                           "" if tools.c_compiler else f"Install one: {APT_TOOLCHAIN}"))
    items.append(CheckItem("Python.h", bool(tools.python_h), tools.python_h or "Python's headers are missing",
                           "" if tools.python_h else f"Install them: {APT_TOOLCHAIN}"))
    return items


def collect() -> list[CheckItem]:
    settings, _ = load_settings()
    probe = capability.probe_hardware()
    return checklist(probe, gpu_start.read_toolchain(), gpu_start.driver_cuda_version(),
                     gpu_start.torch_cuda_version(), settings.engine.gpu_memory_utilization,
                     settings.engine.kv_cache_dtype)


def render(items: list[CheckItem]) -> str:
    lines = ["GPU first-start checklist:"]
    for item in items:
        lines.append(f"  {'✔' if item.ok else '✘'} {item.name:18s} {item.detail}")
        if not item.ok and item.fix:
            lines.append(f"    fix: {item.fix}")
    return "\n".join(lines)


def run_gpu_doctor(as_json: bool) -> int:
    items = collect()
    report: Any = [asdict(item) for item in items]
    print(json.dumps(report, indent=2) if as_json else render(items))
    return 0 if all(item.ok for item in items) else 1


def first_start(tokens: int = 256, speculative_method: str | None = None) -> dict[str, Any]:
    """Run the whole first start with the configured model and record it: each phase's time as vLLM logged
    it, the load time, and decode ms/token beside the planner's bandwidth floor. Meant for a real card (it
    runs on the CPU engine too, where the floor is not known). ``speculative_method`` overrides the
    setting's, so one script records ms/token with and without speculation."""
    from app.core.models.planner import bandwidth_for, plan_for_folder
    from app.core.settings.settings import SamplingConfig
    from app.engine.events import Finished
    from app.engine.local.host import EngineHost

    settings, _ = load_settings()
    if speculative_method is not None:
        settings = settings.with_engine(speculative_method=speculative_method)
    probe = capability.probe_hardware()
    host = EngineHost()
    events: list[Any] = []
    try:
        ready = host.loop_thread.submit(host.start(settings.engine)).result(3600)
        sampling = SamplingConfig(max_tokens=tokens, think_budget=0, thinking=False, temperature=0.0)
        host.loop_thread.submit(host.stream_to(events.append, [{"role": "user", "content": "Count to one thousand."}],
                                               sampling, "first-start", ignore_eos=True)).result(1800)
    finally:
        host.close()
    finished = next(e for e in events if isinstance(e, Finished))
    metrics = finished.metrics
    floor = None
    gpu = probe.gpus[0] if probe.gpus else None
    if gpu is not None and settings.engine.model and (bandwidth := bandwidth_for(gpu.name)):
        from pathlib import Path

        row = plan_for_folder(Path(ready.model), max_model_len=ready.max_model_len,
                              kv_dtypes=(ready.kv_cache_dtype,), vram_total_bytes=gpu.vram_total_bytes,
                              bandwidth_gbps=bandwidth).rows[0]
        floor = row.floor_ms_per_token
    return {"model": ready.model, "kv_cache_dtype": ready.kv_cache_dtype, "gpu": gpu.name if gpu else None,
            "load_seconds": round(ready.load_seconds, 1), "phases": host.start_phases,
            "kv_capacity_tokens": ready.kv_capacity_tokens, "finish": finished.reason,
            "ms_per_token": round(metrics.answer_ms_per_token, 2) if metrics else None,
            "floor_ms_per_token_at_full_context": None if floor is None else round(floor, 2),
            "speculative_method": settings.engine.speculative_method,
            "speculation": asdict(metrics.speculation) if metrics and metrics.speculation else None}


def run_first_start(tokens: int, speculative_method: str | None = None) -> int:
    print(json.dumps(first_start(tokens, speculative_method), indent=2))
    return 0
