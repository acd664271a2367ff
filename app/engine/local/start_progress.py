"""What the engine is doing while it starts, read from vLLM's log as it is written.

A first start on a GPU loads weights, compiles with torch.compile, may build FlashInfer kernels,
profiles memory and captures CUDA graphs: minutes in which vLLM's constructor blocks and says
nothing to its caller. A thread tails the engine log and turns each phase vLLM logs into a status
line with the elapsed time. ``tests/engine/test_start_progress.py`` checks each fragment against the
installed packages' source, as for the start failures.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.engine.local import vllm_logging

POLL_S = 0.5
GPU_FIRST_START = ("a first start on a GPU compiles and captures kernels: several minutes, "
                   "later starts reuse them")
CPU_START = "usually under a minute here"


@dataclass(frozen=True)
class Phase:
    fragment: str  # as vLLM (or FlashInfer) logs it
    source: str  # the file that logs it, inside the installed distribution
    label: str
    progress: float


PHASES: tuple[Phase, ...] = (
    Phase("Starting to load model", "vllm/v1/worker/gpu_model_runner.py", "loading weights", 0.25),
    Phase("Loading weights took", "vllm/model_executor/model_loader/default_loader.py", "weights loaded", 0.4),
    Phase("Dynamo bytecode transform time", "vllm/compilation/backends.py", "compiling the model (torch.compile)",
          0.45),
    Phase("Compiling a graph for compile range", "vllm/compilation/backends.py",
          "compiling the model (torch.compile)", 0.5),
    Phase("Building JIT module", "flashinfer/jit/core.py",
          "building FlashInfer kernels (first start only; minutes)", 0.55),
    Phase("torch.compile and initial profiling/warmup", "vllm/compilation/decorators.py", "profiling memory", 0.65),
    Phase("Available KV cache memory", "vllm/v1/worker/gpu_worker.py", "sizing the KV cache", 0.7),
    Phase("KV cache size:", "vllm/v1/core/kv_cache_utils.py", "warming up (capturing CUDA graphs on a GPU)", 0.8),
    Phase("Graph capturing finished", "vllm/v1/worker/gpu_model_runner.py", "CUDA graphs captured", 0.9),
    Phase("init engine (profile, create kv cache, warmup model) took", "vllm/v1/engine/core.py",
          "starting the engine's loop", 0.95),
)


def latest_phase(text: str) -> Phase | None:
    """The phase of the last line in ``text`` that names one."""
    for line in reversed(text.splitlines()):
        for phase in PHASES:
            if phase.fragment in line:
                return phase
    return None


def status_line(phase: Phase | None, elapsed_s: float, on_gpu: bool) -> str:
    what = phase.label if phase else "starting the engine process"
    return f"{what}… {elapsed_s:.0f} s ({GPU_FIRST_START if on_gpu else CPU_START})"


class StartWatcher:
    """Tails the engine log from ``offset`` on its own thread while vLLM's constructor blocks the engine loop."""

    def __init__(self, log_file: Path, offset: int, on_gpu: bool,
                 report: Callable[[str, float], None]) -> None:
        self._log_file, self._offset, self._on_gpu, self._report = log_file, offset, on_gpu, report
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nalar-start-progress", daemon=True)
        self.phases_seen: list[tuple[str, float]] = []  # (label, seconds since start): the first-start record

    def __enter__(self) -> StartWatcher:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)

    def _run(self) -> None:
        current: Phase | None = None
        while not self._stop.wait(POLL_S):
            phase = latest_phase(vllm_logging.read_log_since(self._log_file, self._offset)) or current
            elapsed = time.monotonic() - self._started
            if phase is not current and phase is not None:
                self.phases_seen.append((phase.label, round(elapsed, 1)))
            current = phase
            self._report(status_line(current, elapsed, self._on_gpu), current.progress if current else 0.2)
