"""The Think switch: per chat next to Send, stored with the conversation, sent with each request;
per request in the local API server as chat_template_kwargs.enable_thinking."""

from __future__ import annotations

import json

from app.core.chat.history import HistoryStore
from app.core.models.model_families import model_family
from app.core.settings.keystore import new_token
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.scripted import Script, ScriptedEngineDouble
from app.server.api_server import LocalApiServer
from tests.support import loopback_http


def test_the_switch_is_per_chat_stored_and_sent(qtbot, make_window) -> None:
    engine = ScriptedEngineDouble([Script(["plain answer"]), Script(["<think>t</think>a"])])
    window = make_window(engine)
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    assert window.controls.think_switch.isChecked() and window.controls.think_switch.isEnabled()
    window.controls.think_switch.click()  # this chat: thinking off
    with qtbot.waitSignal(window.reply_finished, timeout=10_000):
        window.send("hi")
    assert engine.samplings[-1].thinking is False
    window.conversation_list.new_button.click()  # a new chat starts with the default: on
    assert window.controls.think_switch.isChecked()
    with qtbot.waitSignal(window.reply_finished, timeout=10_000):
        window.send("think first")
    assert engine.samplings[-1].thinking is True
    window.conversation_list.select(0)
    assert not window.controls.think_switch.isChecked(), "switching back shows the first chat's own choice"
    window.close()
    assert [c.thinking for c in HistoryStore().conversations()] == [False, True]


def test_always_thinking_models_show_the_switch_on_and_locked(qtbot, make_window) -> None:
    window = make_window(ScriptedEngineDouble(), start=False)
    window.controls.think_switch.show_chat(False)
    window.controls.think_switch.show_family(model_family("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"))
    assert window.controls.think_switch.isChecked() and not window.controls.think_switch.isEnabled()
    assert "always thinks" in window.controls.think_switch.toolTip()
    window.controls.think_switch.show_family(model_family("Qwen/Qwen3-0.6B"))
    switch = window.controls.think_switch
    assert not switch.isChecked() and switch.isEnabled(), "the chat's choice is back"
    assert "enable_thinking" in window.controls.think_switch.toolTip()


def test_an_old_history_file_gains_the_switch_on() -> None:
    import sqlite3

    from app.core.chat.history import history_path
    from tests.support.history_v6 import CONVERSATIONS, write_schema_6

    write_schema_6(history_path())
    db = sqlite3.connect(history_path())  # back to schema 2: no thinking column (nor the loop guard's, schema 4,
    db.executescript("ALTER TABLE conversations DROP COLUMN thinking; ALTER TABLE messages DROP COLUMN loop_guard; "
                     "ALTER TABLE messages DROP COLUMN tool_rounds; ALTER TABLE conversations DROP COLUMN tools; "
                     "PRAGMA user_version = 2;")  # nor the tool calls', schemas 5 and 6)
    db.close()
    assert [c.thinking for c in HistoryStore().conversations()] == [True] * len(CONVERSATIONS)


def test_the_api_server_takes_enable_thinking_per_request() -> None:
    engine = ScriptedEngineDouble([Script(["a"]), Script(["b"]), Script(["c"])])
    engine.loop_thread.submit(engine.start(EngineConfig())).result(10)
    token = new_token()
    server = LocalApiServer(engine, token, port=0)
    url = engine.loop_thread.submit(server.start()).result(10)
    try:
        for kwargs in ({"chat_template_kwargs": {"enable_thinking": False}},
                       {"chat_template_kwargs": {"enable_thinking": True}}, {}):
            body = {"model": "any", "messages": [{"role": "user", "content": "hi"}], **kwargs}
            response = loopback_http.post(f"{url}/chat/completions", json=body, timeout=10,
                                          headers={"Authorization": f"Bearer {token}"})
            assert response.status_code == 200, response.text
            assert json.loads(response.text)["choices"][0]["message"]["content"]
    finally:
        engine.loop_thread.submit(server.stop()).result(10)
        engine.close()
    assert [s.thinking for s in engine.samplings] == [False, True, True]


def test_model_cards_sampling_per_family() -> None:
    from app.core.models.model_families import with_card_sampling

    def card(model: str, thinking: bool = True) -> tuple[float, float, int]:
        s = with_card_sampling(SamplingConfig(temperature=1.0, top_p=1.0, thinking=thinking), model_family(model))
        return s.temperature, s.top_p, s.top_k

    assert card("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B") == (0.6, 0.95, 0)
    assert not model_family("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B").system_prompt
    assert card("Qwen/QwQ-32B-AWQ") == (0.6, 0.95, 40)
    assert card("Qwen/Qwen3-0.6B") == (0.6, 0.95, 20)
    assert card("Qwen/Qwen3-0.6B", thinking=False) == (0.7, 0.8, 20)
    assert card("Qwen/Qwen3-4B-Instruct-2507") == (0.7, 0.8, 20)
    assert card("HuggingFaceTB/SmolLM2-135M-Instruct") == (1.0, 1.0, 0), "no card: the user's settings stay"


def test_choosing_a_model_applies_its_card_and_greedy_thinking_warns(qtbot, make_window) -> None:
    from app.core.models.model_families import GREEDY_THINKING_WARNING

    window = make_window(ScriptedEngineDouble([Script(["<think>t</think>a"])]))
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    chosen = window.controller.settings.model_copy(update={"engine": window.controller.settings.engine.model_copy(
        update={"model": "Qwen/QwQ-32B-AWQ"})})
    window.controller.apply_settings(chosen)
    sampling = window.controller.settings.sampling
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (0.6, 0.95, 40)
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    window.controller.settings.sampling = sampling.model_copy(update={"temperature": 0.0})
    with qtbot.waitSignal(window.reply_finished, timeout=10_000):
        window.send("greedy?")
    assert window.notice_label.isVisible() and window.notice_label.text() == GREEDY_THINKING_WARNING
