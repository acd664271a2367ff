"""What the user sees when the loop guard acts, against the ScriptedEngineDouble (one delta = one token)."""

from __future__ import annotations

from app.core.settings.settings import EngineConfig, SamplingConfig, Settings
from app.engine.scripted import Script, ScriptedEngineDouble
from tests.ui.test_window import send, wait_ready

# 300 distinct thinking tokens, then one 8-token passage over and over: an exact loop from token 300.
INTRO = [f"thought{i} " for i in range(300)]
PASSAGE = ["So ", "the ", "pens ", "cost ", "21 ", "dollars ", "again, ", "so "]
LOOPING_THINKING = ["<think>"] + INTRO + PASSAGE * 40 + ["</think>", "The change is 29 dollars."]
LOOPING_ANSWER = [f"word{i} " for i in range(300)] + PASSAGE * 40
BUDGETS = Settings(engine=EngineConfig(max_model_len=2048), sampling=SamplingConfig(think_budget=1024, max_tokens=512))


def test_a_thinking_loop_is_concluded_collapsed_and_recorded(qtbot, make_window) -> None:
    window = make_window(ScriptedEngineDouble([Script(LOOPING_THINKING, tokens_per_second=4000)]), BUDGETS)
    wait_ready(qtbot, window)
    finished = send(qtbot, window, "Pens cost 3 dollars; Tom buys 7 and pays 50. Change?")
    assert finished.reason == "stop" and len(finished.loops) == 1
    loop = finished.loops[0]
    assert (loop.phase, loop.kind, loop.period, loop.start_token, loop.outcome) == (
        "thinking", "exact", 8, 300, "concluded")
    assert finished.thinking_text == "".join(INTRO).rstrip()  # kept up to where the loop began
    assert window.chat_view.answer_pane.text() == "The change is 29 dollars."
    pane = window.chat_view.thinking_pane
    assert pane.loop_note.isVisibleTo(pane) and pane.continue_button.isVisibleTo(pane)
    assert pane.loop_note.text().startswith("looped: one 8-token passage ×")
    assert "from token 300 · concluded · " in pane.loop_note.text() and "tokens saved" in pane.loop_note.text()
    shown = pane.view.toPlainText()
    assert "collapsed by the loop guard" in shown and shown.count("pens cost") == 0
    row = window.session.history.message_row(window.session.conversation.turns[-1].message_id)
    assert row["loop_guard"] == loop.summary() and row["thinking_text"] == "".join(INTRO).rstrip()


def test_an_answer_loop_is_cut_after_its_first_copy_and_not_sent_back_in_full(qtbot, make_window) -> None:
    engine = ScriptedEngineDouble([Script(LOOPING_ANSWER, tokens_per_second=4000), Script(["fine"])])
    window = make_window(engine)
    wait_ready(qtbot, window)
    finished = send(qtbot, window)
    assert finished.reason == "loop" and finished.loops[0].outcome == "cut"
    kept = "".join([f"word{i} " for i in range(300)] + PASSAGE)
    assert finished.answer_text == kept.lstrip()
    assert window.chat_view.answer_pane.text() == finished.answer_text
    assert "loop guard cut this reply" in window.notice_label.text()
    send(qtbot, window, "next question")
    assert engine.requests[-1][1] == {"role": "assistant", "content": finished.answer_text}


def test_continue_anyway_goes_on_from_the_cut_with_the_guard_off(qtbot, make_window) -> None:
    going_on = [" So", " the", " pens", " cost", " 21", " dollars."] + PASSAGE * 40 + ["</think>", "29 dollars."]
    engine = ScriptedEngineDouble([Script(LOOPING_THINKING, tokens_per_second=4000),
                                   Script(going_on, tokens_per_second=4000)])
    window = make_window(engine, BUDGETS)
    wait_ready(qtbot, window)
    send(qtbot, window)
    kept = "".join(INTRO).rstrip()
    with qtbot.waitSignal(window.reply_finished, timeout=20_000) as blocker:
        window.chat_view.thinking_pane.continue_button.click()
    finished = blocker.args[0]
    assert engine.resumes[-1] is not None and engine.resumes[-1].thinking == kept
    assert finished.loops == ()  # the guard is off for this reply: nothing cut
    assert finished.thinking_text == kept + "".join(going_on[:-2]).rstrip()
    assert window.chat_view.thinking_pane.text() == finished.thinking_text  # the kept trace, then what followed it
    pane = window.chat_view.thinking_pane
    assert window.chat_view.answer_pane.text() == "29 dollars." and not pane.loop_note.isVisibleTo(pane)
    assert len(window.session.conversation.turns) == 1
