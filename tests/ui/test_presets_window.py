"""Presets and the think budget per chat, in the window on the scripted double, over the real SQLite history."""

from __future__ import annotations

import json

from app.core.chat.chat_settings import ChatSettings
from app.core.chat.history import HistoryStore
from app.core.chat.history_import import Imported, export_json, export_markdown
from app.core.models.model_families import model_family
from app.core.settings.settings import EngineConfig, Preset, PresetsConfig, SamplingConfig, Settings, changed
from app.engine.scripted import Script, ScriptedEngineDouble
from app.ui.chat.panes import BUDGET_REACHED
from app.ui.chat.presets.binding import no_system_note
from app.ui.chat.presets.controls import parse_budget
from tests.ui.test_window import send, wait_ready

THOUGHT = ["<think>", *(f"step{n} " for n in range(8)), "</think>", "The ", "answer."]


def settings_with(*presets: Preset, default: str = "Default") -> Settings:
    return Settings(engine=EngineConfig(max_model_len=2048), sampling=SamplingConfig(think_budget=64, max_tokens=64),
                    presets=PresetsConfig(presets=(Preset(name="Default"), *presets), default=default))


def choose(window, name: str) -> None:
    """The user picks a preset in the choice beside Think."""
    combo = window.controls.preset_choice
    index = combo.findData(name)
    assert index >= 0, f"{name} is not offered"
    combo.setCurrentIndex(index)
    combo.activated.emit(index)


PROOF = Preset(name="Proof", system_prompt="You are a careful mathematician.", temperature=0.3, think_budget=300,
               max_tokens=500, thinking=True, tools=False)
QUICK = Preset(name="Quick", system_prompt="Be brief.", think_budget=0, thinking=False)


def test_a_chat_keeps_its_preset_in_the_history_file_and_reads_its_system_prompt(qtbot, make_window) -> None:
    """Bugs caught: the preset chosen for a chat not stored (another chat, or a restart, shows the default); the
    system prompt never reaching the engine; the chat's sampling not the one the request carries."""
    engine = ScriptedEngineDouble([Script(THOUGHT)])
    window = make_window(engine, settings_with(PROOF, QUICK))
    wait_ready(qtbot, window)
    choose(window, "Proof")
    assert window.controls.budget_choice.currentText() == "300 tokens"
    send(qtbot, window, "Prove it.")
    assert engine.requests[-1][0] == {"role": "system", "content": "You are a careful mathematician."}
    sampling = engine.samplings[-1]
    assert (sampling.temperature, sampling.think_budget, sampling.max_tokens) == (0.3, 300, 500)
    assert sampling.top_p == 0.95, "a value the preset leaves unset follows Settings → Sampling"
    proof_chat = window.session.conversation.id
    window.session.store.new_conversation()
    choose(window, "Quick")
    assert not window.controls.think_switch.isChecked(), "the preset's Think default reaches the switch"
    path = window.session.history.path
    stored = {c.id: c for c in HistoryStore(path, owner=False).conversations()}
    assert stored[proof_chat].settings == ChatSettings.of(PROOF)
    quick = stored[window.session.conversation.id]
    assert quick.settings == ChatSettings.of(QUICK) and quick.thinking is False
    window.session.store.select(0)
    assert window.controls.preset_choice.currentText() == "Proof" and window.controls.think_switch.isChecked()


def test_editing_a_preset_leaves_a_chat_that_took_it_as_it_was(qtbot, make_window) -> None:
    """Bug caught: a chat holding a reference to its preset, so editing the preset rewrote what old chats
    were asked with (and showed)."""
    engine = ScriptedEngineDouble([Script(THOUGHT), Script(THOUGHT)])
    window = make_window(engine, settings_with(PROOF))
    wait_ready(qtbot, window)
    choose(window, "Proof")
    send(qtbot, window, "Prove it.")
    settings = window.controller.settings
    edited = changed(PROOF, system_prompt="Answer in French.", temperature=1.2)
    window.controller.apply_settings(changed(settings, presets=PresetsConfig(presets=(Preset(name="Default"),
                                                                                       edited))))
    wait_ready(qtbot, window)
    assert window.controls.preset_choice.currentText() == "Proof (this chat's)"
    send(qtbot, window, "And again?")
    assert engine.requests[-1][0]["content"] == "You are a careful mathematician."
    assert engine.samplings[-1].temperature == 0.3
    [stored] = [c for c in HistoryStore(window.session.history.path, owner=False).conversations()
                if c.id == window.session.conversation.id]
    assert stored.settings == ChatSettings.of(PROOF)


def test_a_new_chat_follows_the_default_until_its_first_reply(qtbot, make_window) -> None:
    """Bug caught: a chat that never chose a preset asked with no values at all (or the first preset's), or
    changing which preset is the default rewrote chats that had already answered under the old one."""
    engine = ScriptedEngineDouble([Script(THOUGHT), Script(THOUGHT)])
    window = make_window(engine, settings_with(PROOF, default="Proof"))
    wait_ready(qtbot, window)
    assert window.controls.preset_choice.currentText() == "Proof"
    send(qtbot, window, "Prove it.")
    first = window.session.conversation
    assert first.settings == ChatSettings.of(PROOF)
    settings = window.controller.settings
    window.controller.apply_settings(changed(settings, presets=changed(settings.presets, default="Default")))
    window.session.store.new_conversation()
    send(qtbot, window, "Hello?")
    assert engine.requests[-1][0]["role"] == "user", "Default has no system prompt"
    assert first.settings == ChatSettings.of(PROOF)


def test_export_holds_the_chats_values_and_an_import_brings_them_back(qtbot, make_window, tmp_path) -> None:
    """Bug caught: an exported chat without its system prompt and sampling, so an import answered differently."""
    window = make_window(ScriptedEngineDouble([Script(THOUGHT)]), settings_with(PROOF))
    wait_ready(qtbot, window)
    choose(window, "Proof")
    send(qtbot, window, "Prove it.")
    conversation = window.session.conversation
    data = json.loads(export_json(conversation))
    assert data["chat_settings"]["values"]["system_prompt"] == "You are a careful mathematician."
    assert data["chat_settings"]["preset"] == "Proof" and data["chat_settings"]["values"]["think_budget"] == 300
    markdown = export_markdown(conversation)
    assert "> You are a careful mathematician." in markdown and "think budget 300" in markdown
    file = tmp_path / "chat.json"
    file.write_text(export_json(conversation), encoding="utf-8")
    done: list[Imported] = []
    operation = window.session.store.import_file(file).success(done.append)
    qtbot.waitUntil(lambda: operation.settled, timeout=10_000)
    [imported] = done[0].conversations
    assert imported.settings == conversation.settings
    [stored] = [c for c in HistoryStore(window.session.history.path, owner=False).conversations()
                if c.id == imported.id]
    assert stored.settings == ChatSettings.of(PROOF)


def test_the_budget_control_is_kept_per_chat(qtbot, make_window) -> None:
    """Bugs caught: the budget chosen beside Think set for every chat (or for none), lost on reload, or a typed
    number not taken; the request not carrying it."""
    engine = ScriptedEngineDouble([Script(THOUGHT)])
    window = make_window(engine, settings_with())
    wait_ready(qtbot, window)
    combo = window.controls.budget_choice
    assert combo.currentText() == "64 tokens", "a chat without its own values follows Settings' budget"
    combo.setCurrentIndex(combo.findData(2_048))
    combo.activated.emit(combo.currentIndex())
    first = window.session.conversation
    window.session.store.new_conversation()
    combo.setEditText("37")
    line = combo.lineEdit()
    assert line is not None
    line.editingFinished.emit()
    second = window.session.conversation
    send(qtbot, window, "Prove it.")
    assert engine.samplings[-1].think_budget == 37
    budgets = {c.id: c.settings.values.think_budget for c in
               HistoryStore(window.session.history.path, owner=False).conversations() if c.settings}
    assert budgets == {first.id: 2_048, second.id: 37}
    window.session.store.select(0)
    assert combo.currentText() == "Medium (2,048)"
    assert window.chat_view.thinking_pane.budget == 2_048


def test_budget_words_and_numbers() -> None:
    """Bug caught: "2,048" or "Medium (2,048)" typed or shown read as no budget."""
    assert [parse_budget(t) for t in ("37", "2,048", "Medium (2,048)", "Unlimited", "lots", "1_000 tokens")] == [
        37, 2048, 2048, 131_072, None, 1000]


def test_the_thinking_header_counts_against_the_chats_budget_and_marks_it_reached(qtbot, make_window) -> None:
    """Bugs caught: the header counting against Settings' budget instead of the chat's, or no sign in the trace
    that the budget (not the model) ended the thinking."""
    window = make_window(ScriptedEngineDouble([Script(THOUGHT, tokens_per_second=50)]), settings_with())
    wait_ready(qtbot, window)
    pane = window.chat_view.thinking_pane
    window.chat_settings.choose_budget(4)
    assert pane.budget == 4
    with qtbot.waitSignal(window.reply_finished, timeout=20_000):
        window.prompt.setPlainText("Think.")
        window.controls.send_button.click()
        qtbot.waitUntil(lambda: " / 4 tokens" in pane.header.text() and pane.tokens > 0, timeout=10_000)
    assert pane.tokens >= 4 and BUDGET_REACHED in pane.header.text()
    assert pane.view.toPlainText().rstrip().endswith(BUDGET_REACHED)
    assert BUDGET_REACHED not in window.session.conversation.turns[-1].thinking, "the mark is the pane's, not text"


def test_under_budget_no_mark(qtbot, make_window) -> None:
    """Bug caught: the mark shown for a thought the model ended itself, under its budget."""
    window = make_window(ScriptedEngineDouble([Script(THOUGHT)]), settings_with())
    wait_ready(qtbot, window)
    window.chat_settings.choose_budget(2_048)
    send(qtbot, window, "Prove it.")
    pane = window.chat_view.thinking_pane
    assert " / 2,048 tokens" in pane.header.text() and BUDGET_REACHED not in pane.header.text()
    assert BUDGET_REACHED not in pane.view.toPlainText()


def test_the_window_says_where_an_r1_distill_reads_the_system_prompt() -> None:
    """Bug caught: a user's system prompt moved into the question with no word about it (or a note shown for
    models that read a system prompt, or for a preset without one)."""
    r1 = model_family("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B")
    assert "first question" in no_system_note(r1, ChatSettings.of(PROOF))
    assert no_system_note(r1, ChatSettings.of(Preset(name="Default"))) == ""
    assert no_system_note(model_family("Qwen/Qwen3-8B"), ChatSettings.of(PROOF)) == ""


def test_gpt_oss_effort_and_the_chats_budget_are_one_choice(qtbot, make_window) -> None:
    """Bug caught: a gpt-oss chat's Effort pick overridden by the chat's named budget (or the other way round),
    so the request's reasoning_effort was not the one shown."""
    engine = ScriptedEngineDouble([Script(THOUGHT)])
    window = make_window(engine, settings_with())
    wait_ready(qtbot, window)
    effort = window.controls.effort_choice
    effort.setCurrentIndex(effort.findData("high"))
    effort.activated.emit(effort.currentIndex())
    assert window.controls.budget_choice.currentText() == "High (8,192)"
    send(qtbot, window, "Prove it.")
    assert (engine.samplings[-1].reasoning_effort, engine.samplings[-1].think_budget) == ("high", 8_192)
    window.chat_settings.choose_budget(512)
    assert effort.currentData() == "low"
