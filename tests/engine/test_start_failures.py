"""Start failures are named from vLLM's own messages, and a retry's fallback is kept only once it works.

The messages are produced by calling vLLM's own checks (the free-memory check, the KV-pool check, the
context-length check) where they are plain functions; the table's other fragments are checked against
the installed packages' source, so an upgrade that rewords one fails here.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.core.models.planner import utilization_for_free_vram
from app.core.settings.settings import EngineConfig, Settings, load_settings, save_settings
from app.engine.errors import EngineFailure, EngineFix, FailureKind
from app.engine.local.start_failures import RULES, classify_start_failure
from app.engine.scripted import ScriptedEngineDouble

GIB = 1 << 30
FP8 = EngineConfig(kv_cache_dtype="fp8_e4m3", max_model_len=8192, gpu_memory_utilization=0.9)
# What vLLM logs at every start (its engine-config line): the old classifier read "fp8 unsupported" into it.
START_LOG = ("INFO vllm.v1.engine.core: Initializing a V1 LLM engine (v0.32.0) with config: model='m', "
             "dtype=torch.bfloat16, max_seq_len=8192, kv_cache_dtype=fp8_e4m3, enforce_eager=False\n")


def site_packages() -> Path:
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent.parent


@cache
def string_literals(path: Path) -> tuple[str, ...]:
    """Every string literal of a Python file, f-strings with their fields as {} and implicit
    concatenation joined (as the message reads at run time)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            found.append("".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values))
    return tuple(found)


@pytest.mark.parametrize("rule", [r for r in RULES if not r.source.startswith("external:")], ids=lambda r: r.name)
def test_each_fragment_is_still_in_the_installed_source(rule) -> None:
    """Bug caught: vLLM (or FlashInfer, Triton, transformers) rewords a message in an upgrade, and the
    failure it names falls through to "the engine failed to start" or, worse, to a wrong cause."""
    path = site_packages() / rule.source
    if rule.source.startswith("flashinfer/") and not path.exists():
        pytest.skip("flashinfer-python is not installed (packaging/setup_venv.sh installs it for tests)")
    assert path.exists(), f"{rule.source} is gone from the installed package"
    literals = string_literals(path)
    for fragment in rule.fragments:
        assert any(fragment in text for text in literals), f"{fragment!r} no longer in {rule.source}"
    for fragment in rule.requires:
        vllm = site_packages() / "vllm"
        assert any(fragment in text for file in vllm.rglob("*.py") if "tests" not in file.parts
                   for text in string_literals(file)), f"{fragment!r} no longer in vLLM"


def test_external_fragments_say_where_they_come_from() -> None:
    """Fragments no installed Python file holds (torch's CUDA C++, gcc) name their origin, so a reader
    knows why the source check skips them; there are few of them."""
    external = [r for r in RULES if r.source.startswith("external:")]
    assert {r.name for r in external} == {"driver", "CUDA out of memory", "Python.h"}
    assert all(len(r.source) > len("external: ") + 10 for r in external)


def vllm_error(call) -> str:
    with pytest.raises(ValueError) as caught:
        call()
    return str(caught.value)


def free_memory_error(free_gib: float, total_gib: float, utilization: float) -> str:
    from vllm.v1.worker.utils import request_memory

    snapshot = SimpleNamespace(total_memory=int(total_gib * GIB), free_memory=int(free_gib * GIB), device_="cuda:0")
    return vllm_error(lambda: request_memory(snapshot, SimpleNamespace(gpu_memory_utilization=utilization)))


def test_free_vram_error_names_other_programs_and_its_fallback_passes_vllms_check() -> None:
    """Bug caught: vLLM's free-memory refusal (a browser and Steam hold 1.4 GiB of a 12 GiB card) was
    reported as "can't run an FP8 KV cache" with the fallback `auto`, which needs more memory, not less."""
    from vllm.v1.worker.utils import request_memory

    text = free_memory_error(10.6, 12.0, 0.9)
    failure = classify_start_failure(RuntimeError("Engine core initialization failed."), START_LOG + text, FP8, "log")
    assert failure.kind is FailureKind.VRAM_IN_USE
    assert "Other programs use 1.4 GiB" in failure.message
    share = failure.fallback.gpu_memory_utilization
    assert share == pytest.approx(0.84)
    snapshot = SimpleNamespace(total_memory=12 * GIB, free_memory=int(10.6 * GIB), device_="cuda:0")
    request_memory(snapshot, SimpleNamespace(gpu_memory_utilization=share))  # vLLM's own check passes
    assert utilization_for_free_vram(0.5, 20 * GIB, 24 * GIB) == 0.5, "never above what the user chose"


def test_fp8_pool_too_small_is_a_memory_failure_with_vllms_estimate() -> None:
    """Bug caught: an fp8 KV pool too small for the context was called "this machine can't run FP8"
    and its retry saved `auto`, which needs twice the memory."""
    from vllm.v1.core.kv_cache_utils import _check_enough_kv_cache_memory

    text = vllm_error(lambda: _check_enough_kv_cache_memory(GIB // 8, lambda: GIB // 4, 8192, lambda _: 4000))
    failure = classify_start_failure(RuntimeError("Engine core initialization failed."), START_LOG + text, FP8,
                                     "log", on_cpu=True)
    assert failure.kind is FailureKind.OUT_OF_MEMORY
    assert failure.fallback == EngineFix(max_model_len=3840)  # vLLM's 4000, in whole 256-token steps
    assert "fp8_e4m3 KV cache" in failure.message and "CPU KV pool" in failure.fix


def test_context_longer_than_the_models_maximum_is_named_with_the_maximum() -> None:
    """Bug caught: "1 validation error for ModelConfig" (max_model_len above the model's) was reported
    as "vLLM could not load the model; pick a folder"."""
    from vllm.config.model import _get_and_verify_max_len

    arch = SimpleNamespace(derived_max_model_len_and_key=(2048.0, "max_position_embeddings"))
    text = vllm_error(lambda: _get_and_verify_max_len(SimpleNamespace(), arch, None, 8192, False, None))
    exc = RuntimeError("1 validation error for ModelConfig\n  Value error, " + text)
    failure = classify_start_failure(exc, START_LOG + "config.json", FP8, "log")
    assert failure.kind is FailureKind.CONTEXT_TOO_LONG
    assert failure.fallback == EngineFix(max_model_len=2048)
    assert "2,048" in failure.message


@pytest.mark.parametrize(("text", "kind"), [
    ("RuntimeError: The NVIDIA driver on your system is too old (found version 12020). Please update your "
     "GPU driver", FailureKind.DRIVER_TOO_OLD),
    ("RuntimeError: Could not find nvcc and default cuda_home='/usr/local/cuda' doesn't exist",
     FailureKind.KERNELS_MISSING),
    ("RuntimeError: Failed to find C compiler. Please specify via CC environment variable or set "
     "triton.knobs.build.impl.", FailureKind.TOOLCHAIN_MISSING),
    ("/tmp/x/main.c:5:10: fatal error: Python.h: No such file or directory", FailureKind.TOOLCHAIN_MISSING),
    ("TimeoutError: Timed out waiting for engine core processes to start. This is often caused by slow weight "
     "loading for large models. Waited 600s (configured by VLLM_ENGINE_READY_TIMEOUT_S).",
     FailureKind.START_TIMEOUT),
])
def test_driver_toolchain_and_timeout_are_named_before_fp8(text: str, kind: FailureKind) -> None:
    """Bug caught: each of these, on an fp8 start, read as "can't run an FP8 KV cache" (the start log names
    kv_cache_dtype), and the retry saved `auto` though the dtype was never the cause."""
    failure = classify_start_failure(RuntimeError("Engine core initialization failed."), START_LOG + text, FP8, "log")
    assert failure.kind is kind
    assert failure.fallback.kv_cache_dtype is None
    if kind is FailureKind.DRIVER_TOO_OLD:
        assert "CUDA 12.2" in failure.message and "580" in failure.fix
    if kind is FailureKind.TOOLCHAIN_MISSING:
        assert "build-essential python3-dev" in failure.fix


def test_real_fp8_refusals_still_fall_back_to_auto() -> None:
    """The fp8 rule still fires on vLLM's real refusals (CPU without AVX-512, Triton below SM 8.9)."""
    for text in ("ValueError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX.",
                 "ValueError: FP8 KV cache is not supported by the Triton attention backend on cuda:0 (compute "
                 "capability 8.6); native FP8 (fp8e4nv) requires SM89+."):
        failure = classify_start_failure(RuntimeError("failed"), START_LOG + text, FP8, "log")
        assert failure.kind is FailureKind.KV_DTYPE_UNSUPPORTED and failure.fallback == EngineFix(kv_cache_dtype="auto")
    unknown = classify_start_failure(RuntimeError("Engine core initialization failed."), START_LOG, FP8, "log")
    assert unknown.kind is FailureKind.ENGINE_START_FAILED, "a dtype named in the log is no evidence"


def test_a_retrys_fallback_is_saved_only_once_the_start_works(qtbot, make_window) -> None:
    """Bug caught: the banner's retry saved its suggestion before trying it, so a wrong guess (`auto` for a
    memory failure) replaced the user's fp8 choice for good even when the retry failed too."""
    first = EngineFailure(FailureKind.VRAM_IN_USE, "Other programs use 3.0 GiB.", "Lower the share.",
                          EngineFix(gpu_memory_utilization=0.6))
    engine = ScriptedEngineDouble(start_failure=first)
    settings = Settings(engine=EngineConfig(kv_cache_dtype="fp8_e4m3", gpu_memory_utilization=0.9))
    save_settings(settings)
    window = make_window(engine, settings)
    qtbot.waitUntil(window.banner.isVisible, timeout=5_000)
    engine.start_failure = EngineFailure(FailureKind.VRAM_IN_USE, "Still not enough.", "Close programs.",
                                         EngineFix(gpu_memory_utilization=0.5))
    window.banner.action.click()
    qtbot.waitUntil(lambda: len(engine.starts) == 2 and "Still not enough" in window.banner.text(), timeout=5_000)
    assert engine.starts[1].gpu_memory_utilization == 0.6, "the retry tried the suggestion"
    assert load_settings()[0].engine.gpu_memory_utilization == 0.9, "a failed suggestion is not saved"
    window.banner.action.click()
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    assert engine.starts[2].gpu_memory_utilization == 0.5
    assert load_settings()[0].engine.gpu_memory_utilization == 0.5, "the suggestion that worked is kept"
    assert len(engine.starts) == 3, "keeping it did not restart the engine"


OTHER_ENGINE_PROCESS = """
import json, logging, logging.config, os
from app.engine.local import vllm_logging
config = vllm_logging.configure_vllm_logging().parent / f"vllm-logging-{os.getpid()}.json"
logging.config.dictConfig(json.loads(config.read_text()))  # as vLLM does on import, from the exported path
try:
    raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
except RuntimeError:
    logging.getLogger("vllm.v1.engine.core").exception("EngineCore failed to start.")
"""


def test_a_start_classifies_only_its_own_processes_log_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug caught: a start read every line appended to the shared engine.log since it began, so a benchmark's
    engine process (or a dying EngineCore) that ran out of memory meanwhile made this start's unrelated
    failure an OUT_OF_MEMORY with a fallback that changes the user's settings."""
    import json
    import logging.config
    import os
    import subprocess
    import sys

    from app.engine.local import vllm_logging

    monkeypatch.delenv("VLLM_LOGGING_CONFIG_PATH", raising=False)
    log_file = vllm_logging.configure_vllm_logging()
    ours = logging.getLogger("vllm.test_ours")
    config = json.loads((log_file.parent / f"vllm-logging-{os.getpid()}.json").read_text())
    handler_config = config["handlers"]["file"]
    handler = logging.FileHandler(handler_config["filename"], encoding="utf-8")
    handler.setFormatter(logging.Formatter(config["formatters"]["plain"]["format"]))
    ours.addHandler(handler)
    ours.propagate = False
    offset = vllm_logging.log_size(log_file)
    try:
        ours.warning("Initializing a V1 LLM engine with config: model='m'")
        subprocess.run([sys.executable, "-c", OTHER_ENGINE_PROCESS], check=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])
        ours.error("the tokenizer could not be loaded")
    finally:
        ours.removeHandler(handler)
        handler.close()
    everything = log_file.read_bytes()[offset:].decode()  # what the old reading saw
    assert "CUDA out of memory" in everything
    mine = vllm_logging.read_log_since(log_file, offset)
    assert "CUDA out of memory" not in mine and "EngineCore failed" not in mine
    assert "Initializing" in mine and "tokenizer could not be loaded" in mine
    failure = classify_start_failure(RuntimeError("Engine core initialization failed."), mine, FP8, str(log_file))
    assert failure.kind is FailureKind.ENGINE_START_FAILED
    assert stat_mode(log_file) == 0o600


def stat_mode(path: Path) -> int:
    import stat

    return stat.S_IMODE(path.stat().st_mode)
