"""The CUDA first start's checks, with NVML and the machine faked (no GPU here or in CI).

Each test names the first-start failure it guards against (issue 24). Where vLLM's own check is a plain
function (the free-memory check), the test calls it on the figures Nalar chose.
"""

from __future__ import annotations

import json
import pickle
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.core.models.model_catalog import CATALOG
from app.core.models.planner import GIB, plan_for_folder
from app.core.settings.settings import EngineConfig
from app.engine.errors import EngineFailure, EngineFix, FailureKind
from app.engine.events import StartPlan
from app.engine.machine import capability, gpu_start, start_plan
from app.engine.machine.capability import GpuInfo, HardwareProbe
from app.engine.machine.gpu_start import Toolchain

MIB = 1 << 20
NO_TOOLS = Toolchain(c_compiler="/usr/bin/cc", python_h="/usr/include/python3.11/Python.h", nvcc=None, ninja=None,
                     kernels=None)
KERNELS = Toolchain("/usr/bin/cc", "/usr/include/python3.11/Python.h", None, None, "flashinfer-cubin 0.7.0.post1")


def rtx(name: str, cc: tuple[int, int], total_gib: float, free_gib: float) -> GpuInfo:
    return GpuInfo(0, f"NVIDIA GeForce {name}", cc, int(total_gib * GIB), int(free_gib * GIB))


def cuda_probe(gpu: GpuInfo) -> HardwareProbe:
    return HardwareProbe("cuda", "0.32.0", frozenset(), (gpu,))


class FakeNvml:
    """pynvml's calls that Nalar makes, answering for one card and one driver."""

    class NVMLError(Exception):
        pass

    def __init__(self, gpu: GpuInfo, cuda_driver: int) -> None:
        self.gpu, self.cuda_driver = gpu, cuda_driver

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: return 1
    def nvmlDeviceGetHandleByIndex(self, index: int) -> int: return index
    def nvmlDeviceGetName(self, handle: int) -> str: return self.gpu.name
    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]: return self.gpu.compute_capability
    def nvmlSystemGetCudaDriverVersion(self) -> int: return self.cuda_driver

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=self.gpu.vram_total_bytes, free=self.gpu.vram_free_bytes)


@pytest.fixture
def model_14b(tmp_path: Path) -> Path:
    """A model folder with the catalog's 14B AWQ config and a safetensors header of its weights' size (the
    planner reads only headers)."""
    model = next(m for m in CATALOG if "14b" in m.repo_id)
    (tmp_path / "config.json").write_text(json.dumps(model.config()))
    header = json.dumps({"w": {"dtype": "U8", "shape": [model.weight_bytes],
                               "data_offsets": [0, model.weight_bytes]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return tmp_path


def test_the_budget_comes_from_free_vram_and_vllms_own_check_passes(model_14b: Path) -> None:
    """Bug caught: Nalar asked for 0.90 of a 16 GiB card while the desktop, browser and Steam held 1.8 GiB;
    vLLM refuses to start unless utilization × total is free ("is less than desired GPU memory utilization")."""
    from vllm.v1.worker.utils import request_memory

    gpu = rtx("RTX 4080", (8, 9), 16.0, 14.2)
    config = EngineConfig(model=str(model_14b), kv_cache_dtype="fp8_e4m3", max_model_len=65536,
                          gpu_memory_utilization=0.9)
    budget = gpu_start.budget_for_free_vram(config, gpu, model_14b)
    share = budget.config.gpu_memory_utilization
    assert share == pytest.approx(0.85) and "Other programs use 1.8 GiB" in budget.note
    snapshot = SimpleNamespace(total_memory=gpu.vram_total_bytes, free_memory=gpu.vram_free_bytes, device_="cuda:0")
    request_memory(snapshot, SimpleNamespace(gpu_memory_utilization=share))  # vLLM's check: no error
    # The context is planned again for the smaller share, so it fits on the first try.
    replanned = budget.config.max_model_len
    assert replanned < 65536 and replanned % 256 == 0
    row = plan_for_folder(model_14b, max_model_len=replanned, kv_dtypes=("fp8_e4m3",),
                          vram_total_bytes=gpu.vram_total_bytes, gpu_memory_utilization=share).rows[0]
    assert row.fits
    assert config.gpu_memory_utilization == 0.9, "the user's choice stays for when the GPU is free again"
    idle = gpu_start.budget_for_free_vram(config, rtx("RTX 4080", (8, 9), 16.0, 15.9), model_14b)
    assert idle.config == config and idle.note == ""


def test_a_driver_older_than_torchs_cuda_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug caught: torch 2.13's CUDA wheels are CUDA 13 builds; on driver 570 (CUDA 12.8) the start died deep
    in the worker and was called an fp8 problem. Now DRIVER_TOO_OLD names both versions and driver 580."""
    gpu = rtx("RTX 5090", (12, 0), 32.0, 30.0)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpu, 12080))
    monkeypatch.setattr(gpu_start, "torch_cuda_version", lambda: (13, 0))
    assert gpu_start.driver_cuda_version() == (12, 8)
    with pytest.raises(EngineFailure) as caught:
        gpu_start.check_gpu_machine()
    failure = caught.value
    assert failure.kind is FailureKind.DRIVER_TOO_OLD
    assert "CUDA 12.8" in failure.message and "CUDA 13.0" in failure.message and "580" in failure.message
    assert gpu_start.driver_problem((13, 0), (13, 0)) is None


def test_torch_cuda_version_is_read_without_importing_torch() -> None:
    """The CPU torch here reports no CUDA; the parser reads the CUDA build's line."""
    assert gpu_start.torch_cuda_version() is None  # torch 2.13.0+cpu


def test_a_missing_compiler_or_python_h_names_the_apt_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Bug caught: Triton compiles its launcher at the first GPU start; without build-essential and python3-dev
    the start failed with a gcc error and Nalar called it an fp8 problem."""
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(gpu_start.sysconfig, "get_paths", lambda: {"include": str(tmp_path)})
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setattr(gpu_start, "venv_bin", lambda: empty)
    tools = gpu_start.read_toolchain(str(empty))
    assert tools.c_compiler is None and tools.python_h is None and tools.ninja is None
    failure = gpu_start.toolchain_problem(tools)
    assert failure is not None and failure.kind is FailureKind.TOOLCHAIN_MISSING
    assert "a C compiler and Python.h" in failure.message and "build-essential python3-dev" in failure.fix
    assert gpu_start.toolchain_problem(NO_TOOLS) is None


def test_without_kernels_the_sampler_is_off_and_the_venv_is_on_path() -> None:
    """Bugs caught: FlashInfer's sampler is on by default and start-up runs it, so without kernels or nvcc
    even KV 'auto' died with "Could not find nvcc"; and the engine's children lacked the venv's bin on PATH,
    so a pip-installed ninja was not found."""
    probe = cuda_probe(rtx("RTX 3060", (8, 6), 12.0, 11.0))
    env = gpu_start.engine_environment(probe, NO_TOOLS, {"PATH": "/usr/bin"})
    assert env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert env["PATH"].split(":")[0] == str(gpu_start.venv_bin()) and env["PATH"].endswith("/usr/bin")
    assert int(env["VLLM_ENGINE_READY_TIMEOUT_S"]) > 600, "vLLM's 600 s is shorter than a first start"
    with_kernels = gpu_start.engine_environment(probe, KERNELS, {"PATH": "/usr/bin"})
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in with_kernels
    mine = gpu_start.engine_environment(probe, NO_TOOLS, {"PATH": "", "VLLM_USE_FLASHINFER_SAMPLER": "1",
                                                          "VLLM_ENGINE_READY_TIMEOUT_S": "60"})
    assert set(mine) == {"PATH"}, "what the user set wins"
    cpu = HardwareProbe("cpu", "0.32.0", frozenset({"avx512f"}))
    assert set(gpu_start.engine_environment(cpu, NO_TOOLS, {"PATH": "/usr/bin"})) == {"PATH"}


@pytest.mark.parametrize(("cc", "refused"), [((8, 6), True), ((8, 9), True), ((12, 0), True), ((9, 0), False)])
def test_fp8_is_refused_up_front_where_it_needs_flashinfer_and_no_kernels(cc: tuple[int, int], refused: bool,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug caught: with fp8 on sm 8.6/8.9/12.0 vLLM picks FLASHINFER, whose kernels need nvcc; the start died
    minutes in. On 9.0 FlashAttention 3 runs E4M3 without FlashInfer."""
    monkeypatch.setattr(capability, "_has_flashinfer", lambda: True)
    probe = cuda_probe(rtx("RTX", cc, 24.0, 23.0))
    verdict = capability.judge_kv_dtype("fp8_e4m3", probe, kernels=NO_TOOLS.has_kernels)
    assert (not verdict.works) is refused
    if not verdict.works:
        assert "download-kernels" in verdict.fix and f"{cc[0]}.{cc[1]}" in (verdict.reason or "")
        assert verdict.failure().fallback == EngineFix(kv_cache_dtype="auto")
    assert capability.judge_kv_dtype("fp8_e4m3", probe, kernels=KERNELS.has_kernels).works
    assert capability.judge_kv_dtype("auto", probe, kernels=NO_TOOLS.has_kernels).works


def test_other_programs_vram_is_shown_only_when_it_matters() -> None:
    assert gpu_start.held_by_others(rtx("RTX 4090", (8, 9), 24.0, 22.5)) == ", of which other programs use 1.5 GiB"
    assert gpu_start.held_by_others(rtx("RTX 4090", (8, 9), 24.0, 23.9)) == ""


def test_the_welcome_dialog_recommends_from_free_vram() -> None:
    """Bug caught: the catalog planned at the model's share of the total while the desktop held part of it,
    so a recommended model's context could not start."""
    from app.core.models.model_catalog import recommendations

    total = 16376 * MIB
    idle = {r.model.repo_id: r.max_context["fp8_e4m3"] for r in recommendations(total, total)}
    busy = {r.model.repo_id: r.max_context["fp8_e4m3"] for r in recommendations(total, total - 3 * GIB)}
    assert all(busy[k] <= idle[k] for k in idle)
    assert any(busy[k] < idle[k] for k in idle)


def test_the_planner_counts_vllms_profile_terms_for_qwq_on_a_4090() -> None:
    """Bug caught: the planner took 1.5 GiB + 4% for everything besides weights, and promised QwQ-32B-AWQ
    15,776 fp8 tokens on a 4090; vLLM 0.32 also subtracts activations at 8,192 batched tokens (QwQ's MLP is
    27,648 wide), non-torch memory and CUDA graphs, from the CUDA-reported total."""
    from app.core.models import planner

    qwq = next(m for m in CATALOG if m.repo_id == "Qwen/QwQ-32B-AWQ")
    config = qwq.config()
    total = 24564 * MIB
    result = planner.plan(config, weight_bytes=qwq.weight_bytes, max_model_len=8192, kv_dtypes=("fp8_e4m3",),
                          vram_total_bytes=total, gpu_memory_utilization=0.95)
    budget = total * planner.NVML_TO_CUDA_TOTAL * 0.95
    activations = planner.activation_bytes(config)
    assert activations > GIB, "8,192 tokens through a 27,648-wide MLP, in bf16"
    expected_pool = budget - qwq.weight_bytes - activations - planner.CUDA_CONTEXT_BYTES - planner.CUDA_GRAPH_BYTES \
        - planner.PLAN_MARGIN_FRACTION * budget
    assert result.rows[0].kv_pool_bytes == pytest.approx(expected_pool, abs=2)
    assert result.rows[0].capacity_tokens < 15_776
    eager = planner.plan(config, weight_bytes=qwq.weight_bytes, max_model_len=8192, kv_dtypes=("fp8_e4m3",),
                         vram_total_bytes=total, gpu_memory_utilization=0.95, enforce_eager=True)
    assert eager.rows[0].kv_pool_bytes - result.rows[0].kv_pool_bytes == pytest.approx(planner.CUDA_GRAPH_BYTES, abs=2)


def test_the_welcome_dialog_says_what_other_programs_hold(qtbot) -> None:
    """The user sees why a model's context is shorter than on an idle card."""
    from app.core.models.model_catalog import recommendations
    from app.ui.dialogs.welcome_dialog import WelcomeDialog

    gpu = rtx("RTX 4080", (8, 9), 15.99, 13.9)
    dialog = WelcomeDialog(cuda_probe(gpu), check_hub=False)
    qtbot.addWidget(dialog)
    assert "of which other programs use 2.1 GiB" in dialog.hardware_label.text()
    for rec in recommendations(gpu.vram_total_bytes, gpu.vram_free_bytes):
        assert rec.summary() in dialog.item_for(rec.model.repo_id).text()


def test_the_engine_host_checks_the_driver_before_loading_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug caught: the host's start never asked; a too-old driver surfaced minutes later from the worker."""
    from app.engine.local.host import EngineHost
    from tests.conftest import require_embedded_model

    gpu = rtx("RTX 4090", (8, 9), 24.0, 23.0)
    monkeypatch.setattr(capability, "probe_hardware", lambda: cuda_probe(gpu))
    monkeypatch.setattr(gpu_start, "driver_cuda_version", lambda: (12, 4))
    monkeypatch.setattr(gpu_start, "torch_cuda_version", lambda: (13, 0))
    host = EngineHost()
    try:
        with pytest.raises(EngineFailure) as caught:
            host.loop_thread.submit(host.start(EngineConfig(model=str(require_embedded_model())))).result(60)
        assert caught.value.kind is FailureKind.DRIVER_TOO_OLD and "CUDA 12.4" in caught.value.message
    finally:
        host.close()


def _plan_on(gpu: GpuInfo, tools: Toolchain, config: EngineConfig, model_dir: Path | None,
             monkeypatch: pytest.MonkeyPatch) -> StartPlan:
    """The child's two steps on a faked card: the machine checked, then the start planned."""
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpu, 13000))
    monkeypatch.setattr(gpu_start, "torch_cuda_version", lambda: (13, 0))
    monkeypatch.setattr(gpu_start, "read_toolchain", lambda path=None: tools)
    monkeypatch.setattr(capability, "_has_flashinfer", lambda: True)
    facts = start_plan.check_machine(config, cuda_probe(gpu))
    return start_plan.plan_start(config, facts, model_dir, environ={"PATH": "/usr/bin"})


def test_the_start_plan_says_what_this_start_uses_and_why(model_14b: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bugs caught: the memory share, context, sampler and kernels were decided in four places, and the window
    saw none of it: a start with 3 GiB held by other programs silently ran with a smaller share and context."""
    config = EngineConfig(model=str(model_14b), kv_cache_dtype="fp8_e4m3", max_model_len=32_768,
                          gpu_memory_utilization=0.9)
    plan = _plan_on(rtx("RTX 4080", (8, 9), 16.0, 13.0), KERNELS, config, model_14b, monkeypatch)
    assert plan.attention_backend == "FLASHINFER" and plan.flashinfer_sampler
    assert plan.config.gpu_memory_utilization < 0.9 and plan.config.max_model_len < 32_768
    assert plan.config.kv_cache_dtype == "fp8_e4m3"
    assert any("Other programs use 3.0 GiB" in note for note in plan.notes)
    assert "FLASHINFER" in plan.describe() and f"{plan.config.max_model_len:,}" in plan.describe()
    assert pickle.loads(pickle.dumps(plan)) == plan  # it crosses the pipe inside EngineReady

    auto = _plan_on(rtx("RTX 3060", (8, 6), 12.0, 11.9), NO_TOOLS, EngineConfig(), None, monkeypatch)
    assert not auto.flashinfer_sampler and ("VLLM_USE_FLASHINFER_SAMPLER", "0") in auto.environment
    assert any("sampler is off" in note for note in auto.notes)


def test_an_fp8_start_without_kernels_is_refused_before_the_model_is_fetched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug caught: the dtype was judged in four places with three copies of the fallback; here the one
    judgement refuses, with its fix and the typed fallback the banner's retry applies."""
    with pytest.raises(EngineFailure) as caught:
        _plan_on(rtx("RTX 3090", (8, 6), 24.0, 23.0), NO_TOOLS, EngineConfig(kv_cache_dtype="fp8_e4m3"), None,
                 monkeypatch)
    failure = caught.value
    assert failure.kind is FailureKind.KV_DTYPE_UNSUPPORTED and "download-kernels" in failure.fix
    assert failure.fallback == EngineFix(kv_cache_dtype="auto")
    retried = failure.fallback.applied_to(EngineConfig(kv_cache_dtype="fp8_e4m3", max_model_len=8192))
    assert retried == EngineConfig(kv_cache_dtype="auto", max_model_len=8192)


def test_no_fp8_prefix_test_is_left_in_the_app() -> None:
    """Bug caught: `startswith("fp8")` in ten files, each its own idea of which dtypes are fp8."""
    root = Path(capability.__file__).parents[2]
    found = [str(p.relative_to(root)) for p in root.rglob("*.py") if 'startswith("fp8")' in p.read_text()
             or "startswith('fp8')" in p.read_text()]
    assert found == []


def test_gpt_oss_is_gated_by_vllms_mxfp4_and_sink_backends_before_it_loads(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Bugs caught: gpt-oss started on a GTX 10xx, where vLLM 0.32 has no MXFP4 MoE backend (it fails deep in
    the worker after the 13 GB load), or with an FP8 KV cache on an RTX 3090, where its attention sinks run
    on Triton, whose fp8 fails at start; and FlashInfer promised for its sinks on a card where Triton runs them."""
    model = tmp_path / "gpt-oss-20b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "gpt_oss"}))
    old = rtx("GTX 1080 Ti", (6, 1), 11.0, 10.5)
    with pytest.raises(EngineFailure) as caught:
        _plan_on(old, KERNELS, EngineConfig(model=str(model)), None, monkeypatch)
    assert caught.value.kind is FailureKind.GPU_TOO_OLD
    assert "Marlin, needs compute capability 7.5+" in caught.value.message
    ampere = rtx("RTX 3090", (8, 6), 24.0, 23.5)
    with pytest.raises(EngineFailure) as caught:
        _plan_on(ampere, KERNELS, EngineConfig(model=str(model), kv_cache_dtype="fp8_e4m3"), None, monkeypatch)
    assert caught.value.kind is FailureKind.KV_DTYPE_UNSUPPORTED and "attention sinks" in caught.value.message
    plan = _plan_on(rtx("RTX 4090", (8, 9), 24.0, 23.5), KERNELS, EngineConfig(model=str(model),
                    kv_cache_dtype="fp8_e4m3"), None, monkeypatch)
    assert plan.attention_backend == "TRITON_ATTN", "FlashInfer would run fp8 here, but not gpt-oss's sinks"
