"""Why an engine start failed, named from vLLM's (and its kernels') own words.

vLLM logs ``kv_cache_dtype=fp8_e4m3`` at every start, so matching the dtype's name anywhere in the
log called every failed fp8 start "this machine can't run an FP8 KV cache" (and its retry saved
``auto`` for good). Here each rule holds the exact fragments of the message that causes it, and the
rules are tried in order: driver, memory, toolchain, timeout, context length, and only then fp8.
``tests/engine/test_start_failures.py`` checks that every fragment still occurs in the installed package's
source, so an upgrade that rewords one fails the suite instead of misnaming a failure.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from app.core.models.planner import utilization_for_free_vram
from app.core.settings.settings import EngineConfig, is_fp8
from app.engine.errors import NO_FIX, EngineFailure, EngineFix, FailureKind, kv_dtype_unsupported

GIB = 1 << 30
APT_TOOLCHAIN = "sudo apt install build-essential python3-dev"
APT_DRIVER = "sudo ubuntu-drivers install   (or: sudo apt install nvidia-driver-580)"


@dataclass(frozen=True)
class StartContext:
    """What the rules need besides the text: the config that failed and where the full log is."""

    config: EngineConfig
    log_path: str
    on_cpu: bool = False


@dataclass(frozen=True)
class FailureRule:
    """One cause: any of ``fragments`` in the text names it.

    ``source`` is where the message is written: a path inside an installed distribution (checked by the
    tests), or ``external:`` and where it comes from when no installed Python file holds it (C++ in
    torch's CUDA build, gcc).
    """

    name: str
    kind: FailureKind
    fragments: tuple[str, ...]
    source: str
    build: Callable[[str, StartContext], EngineFailure]
    requires: tuple[str, ...] = ()  # these must appear too
    fp8_only: bool = False  # only names the failure of an fp8 start

    def matches(self, text: str, config: EngineConfig) -> bool:
        if self.fp8_only and not is_fp8(config.kv_cache_dtype):
            return False
        return any(f in text for f in self.fragments) and all(f in text for f in self.requires)


def _line_with(text: str, fragments: tuple[str, ...]) -> str:
    for line in text.splitlines():
        if any(f in line for f in fragments):
            return line.strip()[:400]
    return ""


def _driver(text: str, ctx: StartContext) -> EngineFailure:
    found = re.search(r"found version (\d+)", text)
    version = f" (it reports CUDA {int(found[1]) // 1000}.{int(found[1]) % 1000 // 10})" if found else ""
    return EngineFailure(FailureKind.DRIVER_TOO_OLD,
                         f"The NVIDIA driver is too old for this vLLM's CUDA build{version}.",
                         f"Install driver 580 or newer: {APT_DRIVER}, then reboot.")


def _free_vram(text: str, ctx: StartContext) -> EngineFailure:
    found = re.search(r"\(([\d.]+)/([\d.]+) GiB\) on startup", text)
    if not found:
        return EngineFailure(FailureKind.VRAM_IN_USE, "Other programs hold too much of the GPU's memory.",
                             "Close programs that use the GPU, or lower the memory share in Settings.")
    free, total = float(found[1]), float(found[2])
    chosen = ctx.config.gpu_memory_utilization
    share = utilization_for_free_vram(chosen, free * GIB, total * GIB)
    return EngineFailure(
        FailureKind.VRAM_IN_USE,
        f"Other programs use {total - free:.1f} GiB of the GPU's {total:.1f} GiB; vLLM wants {chosen:.0%} "
        f"({chosen * total:.1f} GiB) free at start and only {free:.1f} GiB is.",
        f"Close programs that use the GPU (browser, games, Steam), or start with a memory share of {share:.2f}.",
        EngineFix(gpu_memory_utilization=share))


def _kv_pool_too_small(text: str, ctx: StartContext) -> EngineFailure:
    needed = re.search(r"\(([\d.]+) GiB KV cache is needed", text)
    available = re.search(r"available KV cache memory \(([\d.]+) GiB\)", text)
    estimate = re.search(r"estimated maximum model length is (\d+)", text)
    length = ctx.config.max_model_len
    smaller = max(256, (int(estimate[1]) // 256) * 256) if estimate else max(256, length // 2)
    sizes = f" ({needed[1]} GiB; {available[1]} GiB is available)" if needed and available else ""
    pool = "the KV cache pool (Settings → CPU KV pool)" if ctx.on_cpu else "the memory share"
    return EngineFailure(
        FailureKind.OUT_OF_MEMORY,
        f"Not enough memory for the model plus a {length:,}-token {ctx.config.kv_cache_dtype} KV cache{sizes}.",
        f"Lower the context length (to {smaller:,}), or raise {pool}.",
        EngineFix(max_model_len=smaller))


def _no_memory(text: str, ctx: StartContext) -> EngineFailure:
    smaller = max(256, ctx.config.max_model_len // 2)
    return EngineFailure(
        FailureKind.OUT_OF_MEMORY,
        f"Not enough memory for the model plus a {ctx.config.max_model_len:,}-token KV cache.",
        f"Lower the context length (try {smaller:,}), use an fp8 KV cache, or raise the memory share.",
        EngineFix(max_model_len=smaller))


def _nvcc(text: str, ctx: StartContext) -> EngineFailure:
    return EngineFailure(
        FailureKind.KERNELS_MISSING,
        "FlashInfer's GPU kernels are not installed, and building them needs the CUDA toolkit (nvcc), "
        "which this machine lacks.",
        "Run `.venv/bin/vllm download-kernels` (or rerun `make`), or install the CUDA toolkit and ninja.")


def _c_compiler(text: str, ctx: StartContext) -> EngineFailure:
    return EngineFailure(FailureKind.TOOLCHAIN_MISSING,
                         "Triton builds a small C launcher at the first start and found no C compiler.",
                         f"Install one: {APT_TOOLCHAIN}")


def _python_h(text: str, ctx: StartContext) -> EngineFailure:
    return EngineFailure(FailureKind.TOOLCHAIN_MISSING,
                         "Triton builds a small C launcher at the first start and Python's headers "
                         "(Python.h) are missing.", f"Install them: {APT_TOOLCHAIN}")


def _timeout(text: str, ctx: StartContext) -> EngineFailure:
    waited = re.search(r"Waited (\d+)s", text)
    seconds = f" in {waited[1]} s" if waited else ""
    return EngineFailure(
        FailureKind.START_TIMEOUT,
        f"The engine did not finish starting{seconds}: a first start compiles and captures kernels for minutes.",
        f"Retry: compiled kernels are cached, so the next start is quicker. A longer wait: set "
        f"VLLM_ENGINE_READY_TIMEOUT_S (seconds). Progress is in {ctx.log_path}.")


def _context_too_long(text: str, ctx: StartContext) -> EngineFailure:
    found = re.search(r"derived max_model_len \((\w+)=(\d+)", text)
    model_max = int(found[2]) if found else None
    fallback = EngineFix(max_model_len=model_max) if model_max and model_max >= 256 else NO_FIX
    limit = f" of {model_max:,} tokens ({found[1]} in its config.json)" if found and model_max else ""
    return EngineFailure(
        FailureKind.CONTEXT_TOO_LONG,
        f"A context of {ctx.config.max_model_len:,} tokens is longer than the model's maximum{limit}.",
        f"Lower the context length{f' to {model_max:,}' if model_max else ''}.", fallback)


def _fp8_unsupported(text: str, ctx: StartContext) -> EngineFailure:
    reason = (_line_with(text, FP8_FRAGMENTS) or _line_with(text, ("No valid attention backend found",))
              or "vLLM has no attention backend for it here.")
    return kv_dtype_unsupported(f"This machine can't run an FP8 KV cache: {reason}")


def _model_not_found(text: str, ctx: StartContext) -> EngineFailure:
    return EngineFailure(FailureKind.MODEL_NOT_FOUND, f"vLLM could not load the model '{ctx.config.model}'.",
                         "Pick a folder that holds a Hugging Face model (config.json and weights).")


FP8_FRAGMENTS = (
    "FP8 KV cache is not supported by the Triton attention backend",
    "an FP8 KV cache needs native fp8e4nv",
    "FP8 KV cache on CPU requires x86 with AVX-512 or AMX.",
)

# Order matters: a later cause's words can appear in an earlier one's log (every fp8 start names its dtype).
RULES: tuple[FailureRule, ...] = (
    FailureRule("driver", FailureKind.DRIVER_TOO_OLD,
                ("The NVIDIA driver on your system is too old",
                 "CUDA driver version is insufficient for CUDA runtime version"),
                "external: torch's CUDA build (c10/cuda) and the CUDA runtime's error string", _driver),
    FailureRule("free VRAM", FailureKind.VRAM_IN_USE,
                ("is less than desired GPU memory utilization",
                 "is less than the engine's budget after excluding"),
                "vllm/v1/worker/utils.py", _free_vram),
    FailureRule("KV pool too small", FailureKind.OUT_OF_MEMORY,
                ("which is larger than the available KV cache memory",),
                "vllm/v1/core/kv_cache_utils.py", _kv_pool_too_small),
    FailureRule("no KV memory", FailureKind.OUT_OF_MEMORY,
                ("No available memory for the cache blocks",),
                "vllm/v1/core/kv_cache_utils.py", _no_memory),
    FailureRule("CUDA out of memory", FailureKind.OUT_OF_MEMORY,
                ("CUDA out of memory", "Cannot allocate memory"),
                "external: torch's CUDA caching allocator (c10/cuda) and the OS (ENOMEM)", _no_memory),
    FailureRule("nvcc", FailureKind.KERNELS_MISSING, ("Could not find nvcc",),
                "flashinfer/jit/cpp_ext.py", _nvcc),
    FailureRule("C compiler", FailureKind.TOOLCHAIN_MISSING, ("Failed to find C compiler",),
                "triton/runtime/build.py", _c_compiler),
    FailureRule("Python.h", FailureKind.TOOLCHAIN_MISSING, ("Python.h: No such file or directory",),
                "external: gcc's error when python3-dev is missing", _python_h),
    FailureRule("timeout", FailureKind.START_TIMEOUT,
                ("Timed out waiting for engine core processes to start",),
                "vllm/v1/engine/core_client.py", _timeout),
    FailureRule("context too long", FailureKind.CONTEXT_TOO_LONG, ("than the derived max_model_len",),
                "vllm/config/model.py", _context_too_long),
    FailureRule("fp8 Triton", FailureKind.KV_DTYPE_UNSUPPORTED, FP8_FRAGMENTS[:1],
                "vllm/v1/attention/backends/triton_attn.py", _fp8_unsupported),
    FailureRule("fp8 Triton cache", FailureKind.KV_DTYPE_UNSUPPORTED, FP8_FRAGMENTS[1:2],
                "vllm/v1/attention/ops/triton_reshape_and_cache_flash.py", _fp8_unsupported),
    FailureRule("fp8 CPU", FailureKind.KV_DTYPE_UNSUPPORTED, FP8_FRAGMENTS[2:],
                "vllm/v1/attention/backends/cpu_attn.py", _fp8_unsupported),
    FailureRule("fp8: no backend", FailureKind.KV_DTYPE_UNSUPPORTED, ("No valid attention backend found",),
                "vllm/platforms/cuda.py", _fp8_unsupported, requires=("kv_cache_dtype not supported",),
                fp8_only=True),
    FailureRule("model folder", FailureKind.MODEL_NOT_FOUND,
                ("does not appear to have a file named", "is not a local folder and is not a valid model"),
                "transformers/utils/hub.py", _model_not_found),
    FailureRule("hub repository", FailureKind.MODEL_NOT_FOUND, ("Repository Not Found for url",),
                "huggingface_hub/utils/_http.py", _model_not_found),
)


def classify_start_failure(exc: BaseException, engine_log: str, config: EngineConfig,
                           log_path: str, on_cpu: bool = False) -> EngineFailure:
    """The typed failure for a start that raised ``exc`` after logging ``engine_log``."""
    text = f"{exc}\n{engine_log}"
    ctx = StartContext(config, log_path, on_cpu)
    for rule in RULES:
        if rule.matches(text, config):
            return rule.build(text, ctx)
    first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return EngineFailure(FailureKind.ENGINE_START_FAILED, f"The engine failed to start: {first_line}",
                         f"See {log_path} for details.")
