"""This machine's NVIDIA GPUs as NVML reports them: the one reader the engine's probe and the hub's verdicts share."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_capability: tuple[int, int]
    vram_total_bytes: int
    vram_free_bytes: int


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
