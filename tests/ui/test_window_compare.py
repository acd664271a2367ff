"""Compare… and the keep-its-thinking switch in the window, with the scripted engine double and a real SQLite file:
the variants' requests, the columns, the agreement line, keeping one, and the switch reaching the next request."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication

from app.core.chat.history import HistoryStore
from app.core.settings.settings import MAX_THINK_BUDGET
from app.engine.scripted import Script, ScriptedEngineDouble
from app.ui.compare.compare_dialog import CompareDialog
from tests.ui.test_window_branches import answered, click_link


def open_dialog(qtbot, window) -> CompareDialog:
    window.menus.trigger("compare")
    qtbot.waitUntil(lambda: any(isinstance(w, CompareDialog) and w.isVisible()
                                for w in QApplication.topLevelWidgets()), timeout=5_000)
    return next(w for w in QApplication.topLevelWidgets() if isinstance(w, CompareDialog))


def test_compare_runs_the_variants_at_once_and_keeps_one_as_the_branch(qtbot, make_window) -> None:
    """Bugs caught: the variants sent one after another (the second request only once the first ended), or with
    the chat's sampling instead of their own; their replies crossed between columns; an agreement line missing or
    calling "x = 3.50" and "3.5" different; Keep not making that reply the chat's branch, the others lost instead
    of staying as tries of the question, or the choice forgotten on reopening."""
    slow = [f"w{i} " for i in range(30)]
    window = make_window(ScriptedEngineDouble([
        Script(["<think>first</think>", "an answer"]),
        Script([*slow, "So x = 3.50."], tokens_per_second=400),
        Script(["<think>", *slow, "</think>", "It is 3.5"], tokens_per_second=400),
        Script(["<think>short</think>", "**3.5**"], tokens_per_second=400)]))
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    answered(qtbot, window, lambda: window.send("Solve 2x = 7"))
    engine = window.controller.bridge.engine
    dialog = open_dialog(qtbot, window)
    assert [v.label for v in dialog.variants()] == ["Think off", "Budget 256", "Unlimited"]
    started: list[int] = []
    dialog.runner.column_changed.connect(lambda _place: started.append(len(engine.requests)))
    dialog.run_button.click()
    qtbot.waitUntil(lambda: bool(dialog.columns) and all(c.keep_button.isEnabled() for c in dialog.columns),
                    timeout=20_000)
    assert started and min(started) == 4, "every variant's request was sent before any reply's figures came back"
    sent = engine.samplings[1:]
    assert [(s.thinking, s.think_budget) for s in sent] == [(False, 64), (True, 256), (True, MAX_THINK_BUDGET)]
    comparison = dialog.runner.comparison
    answers = ["".join(slow) + "So x = 3.50.", "It is 3.5", "**3.5**"]  # Think off: the whole reply is answer
    assert [run.turn.answer for run in comparison.runs] == answers
    assert [c.answer.toPlainText() for c in dialog.columns] == answers
    assert dialog.agreement.text() == "The final numbers agree (3.5); the wording differs."
    assert "tokens" in dialog.columns[1].figures.text() and dialog.runner.comparison.done
    assert window.session.conversation.turns[-1].answer == "an answer", "nothing changes until one is kept"

    dialog.columns[1].keep_button.click()
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=5_000)
    conversation = window.session.conversation
    assert conversation.turns[-1] is comparison.runs[1].turn and conversation.siblings(0) == (2, 4)
    qtbot.waitUntil(lambda: window.chat_view.answer_pane.text() == "It is 3.5", timeout=5_000)
    assert "◀ 3/4 ▶" in window.chat_view.transcript.toPlainText()
    window.close()
    [loaded] = HistoryStore().conversations()
    assert loaded.turns[-1].answer == "It is 3.5"
    assert sorted(t.answer for t in loaded.tree) == sorted(["an answer", *answers])


def test_a_refused_set_of_variants_sends_nothing(qtbot, make_window) -> None:
    """Bug caught: a Compare of one variant (the others set to None) sent anyway, adding a lone sibling."""
    window = make_window(ScriptedEngineDouble([Script(["<think>t</think>", "a"])]))
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    answered(qtbot, window, lambda: window.send("q"))
    dialog = open_dialog(qtbot, window)
    for picker in dialog.pickers[1:]:
        picker.kind.setCurrentText("None")
    dialog.run_button.click()
    qtbot.waitUntil(lambda: "Choose 2 to 4 variants (now 1)" in dialog.agreement.text(), timeout=5_000)
    assert len(window.session.conversation.tree) == 1 and len(window.controller.bridge.engine.requests) == 1
    dialog.reject()


def test_the_keep_thinking_switch_shows_its_cost_and_reaches_the_next_request(qtbot, make_window) -> None:
    """Bugs caught: no switch on an earlier turn, one on the last (no later prompt reads it), a click that isn't
    saved, or the next request without that turn's thinking (or with it while the switch is off)."""
    window = make_window(ScriptedEngineDouble([Script(["<think>carry the one</think>", "12"]),
                                               Script(["<think>t</think>", "24"]), Script(["<think>u</think>", "48"])]))
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    answered(qtbot, window, lambda: window.send("7+5?"))
    answered(qtbot, window, lambda: window.send("Double it?"))
    engine, transcript = window.controller.bridge.engine, window.chat_view.transcript
    assert "kept_thinking" not in engine.requests[-1][1], "off by default"
    text = transcript.toPlainText()
    assert "Keep its thinking: off (" in text and text.count("Keep its thinking") == 1
    click_link(qtbot, transcript, "nalar-turn:0/keep")
    qtbot.waitUntil(lambda: "Keep its thinking: on (" in transcript.toPlainText(), timeout=5_000)
    answered(qtbot, window, lambda: window.send("And again?"))
    assert engine.requests[-1][1]["kept_thinking"] == "carry the one"
    assert "kept_thinking" not in engine.requests[-1][3], "only the turn whose switch is on"
    window.close()
    assert [t.keep_thinking for t in HistoryStore().conversations()[0].turns] == [True, False, False]
