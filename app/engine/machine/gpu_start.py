"""The CUDA engine's first start on a gaming PC: what it needs, checked before vLLM is asked.

vLLM 0.32's CUDA build compiles FlashInfer kernels on first use (nvcc + ninja) unless they were
downloaded (`vllm download-kernels`), builds a Triton launcher with a C compiler and Python.h, needs
a driver new enough for the CUDA torch was built with, and refuses to start unless
gpu_memory_utilization × total VRAM is free, while a desktop, browser and Steam hold some of it.
Everything here reads the machine (NVML, PATH, installed distributions) and never creates a CUDA
context. ``engine_environment`` is the one place the engine's environment is decided.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import re
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from app.core.models.planner import GIB, PlannerError, plan_for_folder, utilization_for_free_vram
from app.core.settings.settings import EngineConfig, changed
from app.engine.errors import EngineFailure, FailureKind
from app.engine.machine import capability
from app.engine.machine.capability import GpuInfo, HardwareProbe

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 1800  # vLLM's 600 s default is shorter than a first start that compiles kernels
KERNEL_DISTRIBUTIONS = ("flashinfer-jit-cache", "flashinfer-cubin")  # what `vllm download-kernels` installs
APT_TOOLCHAIN = "sudo apt install build-essential python3-dev"
APT_DRIVER = "sudo ubuntu-drivers install (or sudo apt install nvidia-driver-580), then reboot"
DRIVER_FOR_CUDA = {12: 525, 13: 580}  # the oldest Linux driver branch for each CUDA major release
SHOWN_HELD_BYTES = GIB // 4  # below this, other programs' VRAM is not worth a word


@dataclass(frozen=True)
class Toolchain:
    """What the first start may need to build: Triton's launcher, and FlashInfer's kernels if not downloaded."""

    c_compiler: str | None
    python_h: str | None
    nvcc: str | None
    ninja: str | None
    kernels: str | None  # the installed kernel distribution ("flashinfer-cubin 0.7.0.post1"), if any

    @property
    def can_build_kernels(self) -> bool:
        return bool(self.nvcc and self.ninja)

    @property
    def has_kernels(self) -> bool:
        """FlashInfer can run: its kernels were downloaded, or they can be compiled here."""
        return bool(self.kernels) or self.can_build_kernels


def venv_bin() -> Path:
    """The bin folder of the Python running us: pip-installed ninja and vllm live there."""
    return Path(sys.executable).parent


def search_path(path: str | None = None) -> str:
    """PATH with our venv's bin first, so the engine's children find ninja even when the app was started
    from a desktop launcher that never activated the venv."""
    parts = [p for p in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep) if p]
    first = str(venv_bin())
    return os.pathsep.join([first, *[p for p in parts if p != first]])


def _installed(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def read_toolchain(path: str | None = None) -> Toolchain:
    path = search_path(path)
    compiler = os.environ.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c, path=path)), None)
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    cuda_home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    nvcc = shutil.which("nvcc", path=path) or shutil.which("nvcc", path=str(Path(cuda_home) / "bin"))
    kernels = next((f"{d} {v}" for d in KERNEL_DISTRIBUTIONS if (v := _installed(d))), None)
    return Toolchain(compiler, str(header) if header.exists() else None, nvcc, shutil.which("ninja", path=path),
                     kernels)


def torch_cuda_version() -> tuple[int, int] | None:
    """The CUDA release the installed torch was built for, read from torch/version.py (no torch import)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return None
    found = re.search(r"^cuda\s*(?::[^=]*)?=\s*'(\d+)\.(\d+)", text, re.MULTILINE)
    return (int(found[1]), int(found[2])) if found else None


def driver_cuda_version() -> tuple[int, int] | None:
    """The newest CUDA the installed driver supports (NVML), or None without an NVIDIA driver."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        version = int(pynvml.nvmlSystemGetCudaDriverVersion())
        return version // 1000, version % 1000 // 10
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def driver_problem(driver: tuple[int, int] | None, built_for: tuple[int, int] | None) -> EngineFailure | None:
    """DRIVER_TOO_OLD when the driver can't run what torch was built for (torch's CUDA 13 needs R580+)."""
    if driver is None or built_for is None or driver >= built_for:
        return None
    branch = DRIVER_FOR_CUDA.get(built_for[0])
    need = f"driver {branch} or newer" if branch else f"a driver for CUDA {built_for[0]}.{built_for[1]}"
    return EngineFailure(
        FailureKind.DRIVER_TOO_OLD,
        f"The NVIDIA driver supports CUDA {driver[0]}.{driver[1]}, but the installed torch is built for CUDA "
        f"{built_for[0]}.{built_for[1]}: it needs {need}.", f"Update the driver: {APT_DRIVER}.")


def toolchain_problem(tools: Toolchain) -> EngineFailure | None:
    """Triton compiles its launcher at every first start (torch.compile is on unless enforce_eager)."""
    missing = [name for name, have in (("a C compiler", tools.c_compiler), ("Python.h", tools.python_h)) if not have]
    if not missing:
        return None
    return EngineFailure(FailureKind.TOOLCHAIN_MISSING,
                         f"The GPU engine's first start builds a small C launcher and needs {' and '.join(missing)}.",
                         f"Install them: {APT_TOOLCHAIN}")


def engine_environment(probe: HardwareProbe, tools: Toolchain | None = None,
                       environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables the engine (and every process it starts) runs with. What the user set wins."""
    environ = dict(os.environ) if environ is None else environ
    env = {"PATH": search_path(environ.get("PATH", ""))}
    if probe.engine_kind != "cuda":
        return env
    if "VLLM_ENGINE_READY_TIMEOUT_S" not in environ:
        env["VLLM_ENGINE_READY_TIMEOUT_S"] = str(READY_TIMEOUT_S)
    tools = tools or read_toolchain(env["PATH"])
    if not tools.has_kernels and "VLLM_USE_FLASHINFER_SAMPLER" not in environ:
        # FlashInfer's sampler is on by default and start-up runs it, even with KV 'auto'.
        env["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
    return env


def held_by_others(gpu: GpuInfo) -> str:
    """", of which other programs use X GiB" when they hold enough to matter, else ""."""
    held = gpu.vram_total_bytes - gpu.vram_free_bytes
    return f", of which other programs use {held / GIB:.1f} GiB" if held >= SHOWN_HELD_BYTES else ""


@dataclass(frozen=True)
class GpuBudget:
    """What this start asks vLLM for, given what is free now."""

    config: EngineConfig
    note: str  # what changed and why, for the status line; "" when nothing did


def budget_for_free_vram(config: EngineConfig, gpu: GpuInfo, model_dir: Path | None) -> GpuBudget:
    """utilization = min(chosen, (free − margin) ÷ total), and the context replanned for it.

    Applies to this start only: the saved settings keep the user's choice for when the GPU is free again.
    """
    share = utilization_for_free_vram(config.gpu_memory_utilization, gpu.vram_free_bytes, gpu.vram_total_bytes)
    if share >= config.gpu_memory_utilization:
        return GpuBudget(config, "")
    changes: dict[str, object] = {"gpu_memory_utilization": share}
    note = f"Other programs use {(gpu.vram_total_bytes - gpu.vram_free_bytes) / GIB:.1f} GiB of VRAM: " \
           f"starting with {share:.0%} instead of {config.gpu_memory_utilization:.0%}"
    if model_dir is not None:
        try:
            row = plan_for_folder(model_dir, max_model_len=config.max_model_len, kv_dtypes=(config.kv_cache_dtype,),
                                  vram_total_bytes=gpu.vram_total_bytes, gpu_memory_utilization=share,
                                  enforce_eager=bool(config.enforce_eager)).rows[0]
        except (PlannerError, OSError, ValueError, KeyError):
            row = None
        if row is not None and not row.fits and row.capacity_tokens >= 256:
            changes["max_model_len"] = row.capacity_tokens // 256 * 256
            note += f", and a context of {changes['max_model_len']:,} tokens instead of {config.max_model_len:,}"
    return GpuBudget(changed(config, **changes), note + ".")


def check_gpu_machine() -> Toolchain:
    """Checks before a CUDA start, each a typed failure naming its fix: the driver, then the toolchain.
    Returns the toolchain: whether FlashInfer's kernels can be had decides fp8 and the sampler."""
    failure = driver_problem(driver_cuda_version(), torch_cuda_version())
    if failure is not None:
        raise failure
    tools = read_toolchain()
    failure = toolchain_problem(tools)
    if failure is not None:
        raise failure
    return tools


def budget_for_now(config: EngineConfig, model_dir: Path | None) -> GpuBudget:
    """This start's budget for the VRAM free now (read again, not the cached probe: other programs come
    and go)."""
    gpus = capability.read_nvidia_gpus()
    if not gpus:
        return GpuBudget(config, "")
    return budget_for_free_vram(config, gpus[0], model_dir)
