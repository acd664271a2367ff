"""The reply logic without a window: ChatSession and EngineController against the ScriptedEngineDouble."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from app.core.chat.history import HistoryStore
from app.core.settings.keystore import KeyStore
from app.core.settings.settings import EngineConfig, SamplingConfig, Settings
from app.engine.events import Finished
from app.engine.requests import Resume
from app.engine.scripted import Script, ScriptedEngineDouble
from app.ui.controllers.chat_session import ChatSession
from app.ui.controllers.engine_controller import EngineController


@pytest.fixture
def make_session(qtbot, ui_loop) -> Iterator[object]:
    """A started session on a scripted engine; teardown closes it and checks the engine thread ended."""
    made: list[tuple[ChatSession, EngineController]] = []

    def factory(*scripts: Script, sampling: SamplingConfig | None = None) -> ChatSession:
        settings = Settings(engine=EngineConfig(max_model_len=2048),
                            sampling=sampling or SamplingConfig(think_budget=64, max_tokens=64))
        controller = EngineController(ScriptedEngineDouble(list(scripts)), settings, KeyStore())
        session = ChatSession(controller, HistoryStore())
        made.append((session, controller))
        session.store.load_history()
        controller.start_engine()
        qtbot.waitUntil(lambda: controller.engine_ready, timeout=10_000)
        return session

    yield factory
    for session, controller in made:
        session.close()
        controller.close()
        session.history.close()
        assert not controller.bridge.engine.loop_thread.alive


def send(qtbot, session: ChatSession, text: str) -> Finished:
    with qtbot.waitSignal(session.reply_finished, timeout=20_000) as blocker:
        asyncio.ensure_future(session.send(text))
    return blocker.args[0]


def test_a_reply_lands_in_its_turn_in_the_model_and_in_history(qtbot, make_session) -> None:
    session = make_session(Script(["<think>add ", "them</think>", "It is ", "5."]))
    deltas: list[str] = []
    session.reply.answer_added.connect(deltas.append)
    finished = send(qtbot, session, "What is 2+3?")
    assert finished.reason == "stop" and not session.streaming
    turn = session.conversation.turns[-1]
    assert (turn.user, turn.thinking, turn.answer) == ("What is 2+3?", "add them", "It is 5.")
    assert "".join(deltas) == "It is 5." and turn.thinking_tokens + turn.answer_tokens == 4 and turn.backend
    assert session.store.model.index(0).data() == "What is 2+3?", "the first question names the conversation"
    row = session.history.message_row(turn.message_id)
    assert (row["answer_text"], row["thinking_text"], row["finish_reason"]) == ("It is 5.", "add them", "stop")


def test_a_second_turn_sends_the_first_as_context(qtbot, make_session) -> None:
    session = make_session(Script(["<think>a</think>", "Four."]), Script(["<think>b</think>", "Eight."]))
    send(qtbot, session, "2+2?")
    send(qtbot, session, "Double it?")
    engine = session.controller.bridge.engine
    assert [m["content"] for m in engine.requests[-1]] == ["2+2?", "Four.", "Double it?"]
    assert [t.answer for t in session.conversation.turns] == ["Four.", "Eight."]


def test_stop_keeps_the_partial_reply_and_says_so(qtbot, make_session) -> None:
    words = [f"w{i} " for i in range(400)]
    session = make_session(Script(["<think>t</think>", *words], tokens_per_second=100))
    notices: list[str] = []
    session.notice.connect(notices.append)
    session.reply.answer_added.connect(lambda _text: session.stop() if session.reply.answer.count(" ") >= 3 else None)
    with qtbot.waitSignal(session.reply_finished, timeout=20_000) as blocker:
        asyncio.ensure_future(session.send("count"))
    assert blocker.args[0].reason == "abort"
    turn = session.conversation.turns[-1]
    assert turn.answer.startswith("w0 w1 w2 ") and len(turn.answer) < len("".join(words))
    assert session.history.message_row(turn.message_id)["finish_reason"] == "abort"
    assert notices == ["Stopped. The partial reply is kept."]


def test_partial_text_is_saved_while_streaming_and_close_marks_it_aborted(qtbot, make_session, monkeypatch) -> None:
    monkeypatch.setattr("app.ui.controllers.chat_session.PARTIAL_SAVE_MS", 100)  # 1 s in the app
    words = [f"w{i} " for i in range(2000)]
    session = make_session(Script(["<think>t</think>", *words], tokens_per_second=200))
    asyncio.ensure_future(session.send("long"))
    qtbot.waitUntil(lambda: session.streaming and bool(session.conversation.turns[-1].message_id), timeout=10_000)
    turn = session.conversation.turns[-1]
    # The partial timer writes what arrived so far before the reply ends.
    qtbot.waitUntil(lambda: session.history.message_row(turn.message_id)["answer_text"].startswith("w0 "),
                    timeout=10_000)
    assert session.streaming, "saved while the reply still streams, not at its end"
    session.close()
    assert not session.streaming
    row = session.history.message_row(turn.message_id)
    assert row["finish_reason"] == "abort" and row["answer_text"] == turn.answer and turn.answer.startswith("w0 ")


def test_conversations_are_added_renamed_and_deleted_through_the_model(qtbot, make_session) -> None:
    session = make_session()
    store = session.store
    model = store.model
    assert model.rowCount() == 1 and store.current_row == 0
    inserted: list[int] = []
    model.rowsInserted.connect(lambda _parent, first, _last: inserted.append(first))
    store.new_conversation()
    assert inserted == [1] and store.current_row == 1
    store.rename("Second")
    assert model.index(1).data() == "Second"
    store.select(0)
    store.delete_current()
    assert [c.title for c in model] == ["Second"] and store.current_row == 0
    assert [c.title for c in session.history.conversations()] == ["Second"]
    store.delete_current()
    assert model.rowCount() == 1 and model.index(0).data() == "New conversation", "never an empty list"


def test_pause_stops_the_engine_and_resume_starts_it_again(qtbot, make_session) -> None:
    session = make_session()
    controller = session.controller

    async def pause() -> bool:
        return await controller.pause()

    task = asyncio.ensure_future(pause())
    qtbot.waitUntil(task.done, timeout=10_000)
    assert task.result() is True and not controller.engine_ready
    with qtbot.waitSignal(controller.bridge.engine_ready, timeout=10_000):
        controller.resume()
    assert controller.engine_ready and len(controller.bridge.engine.starts) == 2


# The loop guard's Continue anyway. One scripted delta is one token: 300 distinct thinking tokens, then an
# 8-token passage over and over (an exact loop from token 300, concluded at once by the default guard).
INTRO = [f"thought{i} " for i in range(300)]
PASSAGE = ["So ", "the ", "pens ", "cost ", "21 ", "dollars ", "again, ", "so "]
GUARDED = SamplingConfig(think_budget=1024, max_tokens=512)


def continue_anyway(qtbot, session: ChatSession) -> Finished:
    with qtbot.waitSignal(session.reply_finished, timeout=20_000) as blocker:
        session.continue_past_loop()
    return blocker.args[0]


def test_continue_anyway_goes_on_with_the_cut_thinking_with_the_guard_off(qtbot, make_session) -> None:
    looping = Script(["<think>", *INTRO, *PASSAGE * 40, "</think>", "It is 29."], tokens_per_second=4000)
    going_on = Script([" So", " the pens", " cost 21 dollars.", *PASSAGE * 40, "</think>", "Change: 29 dollars."],
                      tokens_per_second=4000)
    session = make_session(looping, going_on, sampling=GUARDED)
    first = send(qtbot, session, "Pens cost 3 dollars; Tom buys 7 and pays 50. Change?")
    kept = "".join(INTRO).rstrip()
    assert [loop.outcome for loop in first.loops] == ["concluded"] and first.thinking_text == kept
    shown: list[str] = []
    session.reply.reset.connect(lambda _: shown.append(session.reply.thinking))  # the kept text, drawn again
    session.reply.thinking_added.connect(shown.append)

    finished = continue_anyway(qtbot, session)
    engine = session.controller.bridge.engine
    assert engine.resumes[-1] == Resume("thinking", kept, "")  # on from where the guard cut, not asked anew
    assert finished.loops == (), "the guard is off for the continued reply: forty more copies pass"
    going_on_text = " So the pens cost 21 dollars." + "".join(PASSAGE * 40).rstrip()
    assert finished.thinking_text == kept + going_on_text
    assert "".join(shown) == finished.thinking_text == session.reply.thinking, "the kept text is shown again first"
    assert finished.answer_text == "Change: 29 dollars." and len(session.conversation.turns) == 1
    turn = session.conversation.turns[-1]
    assert turn.thinking == finished.thinking_text
    record = session.history.message_row(turn.message_id)["loop_guard"]
    assert record.startswith(first.loops[0].summary()) and "continued anyway, guard off" in record


def test_continue_anyway_goes_on_with_a_cut_answer(qtbot, make_session) -> None:
    words = [f"word{i} " for i in range(300)]
    session = make_session(Script([*words, *PASSAGE * 40], think_start="closed", tokens_per_second=4000),
                           Script(["and ", "that ", "is ", "all."], tokens_per_second=4000), sampling=GUARDED)
    first = send(qtbot, session, "Say it again and again")
    assert first.reason == "loop" and first.loops[0].outcome == "cut"
    kept = "".join(words + PASSAGE)
    assert first.answer_text == kept
    finished = continue_anyway(qtbot, session)
    assert session.controller.bridge.engine.resumes[-1] == Resume("answer", "", kept)
    assert finished.reason == "stop" and finished.answer_text == kept + "and that is all."
    assert session.reply.answer == finished.answer_text == session.conversation.turns[-1].answer


def test_continue_anyway_without_a_cut_asks_again_with_the_guard_off(qtbot, make_session) -> None:
    session = make_session(Script(["<think>a</think>", "Four."]), Script(["<think>", *PASSAGE * 60, "</think>", "4"],
                                                                           tokens_per_second=4000), sampling=GUARDED)
    send(qtbot, session, "2+2?")
    finished = continue_anyway(qtbot, session)
    assert session.controller.bridge.engine.resumes[-1] is None
    assert finished.loops == () and finished.answer_text == "4" and len(session.conversation.turns) == 1


def test_a_partial_save_after_a_thinking_loop_keeps_the_thinking_as_the_guard_cut_it(qtbot, make_session) -> None:
    """Bug caught: the session kept its own copy of the reply from the deltas and cut only a looping answer, so
    a partial save (and a close mid-reply) after the guard cut a thinking loop stored the copies it had removed:
    after a crash, the history showed the loop the guard had cut."""
    answer = [f"a{i} " for i in range(4000)]
    looping = Script(["<think>", *INTRO, *PASSAGE * 40, "</think>", *answer], tokens_per_second=1000)
    session = make_session(looping, sampling=GUARDED)
    loops: list[object] = []
    session.reply.loop_noted.connect(loops.append)
    asyncio.ensure_future(session.send("Pens cost 3 dollars; Tom buys 7 and pays 50. Change?"))
    # The reply model follows the bridge, loop cuts included: wait for the answer and the loop note.
    qtbot.waitUntil(lambda: session.streaming and session.reply.answer.startswith("a0 ") and bool(loops),
                    timeout=20_000)
    assert [loop.outcome for loop in loops] == ["concluded"]
    turn = session.conversation.turns[-1]
    kept = "".join(INTRO).rstrip()
    session.save_partial()
    row = session.history.message_row(turn.message_id)
    assert row["thinking_text"] == kept and row["answer_text"].startswith("a0 ")
    session.close()
    row = session.history.message_row(turn.message_id)
    assert row["finish_reason"] == "abort" and row["thinking_text"] == turn.thinking == kept


def test_continue_after_a_max_tokens_end_goes_on_in_the_same_turn_and_keeps_the_first_part(qtbot,
                                                                                           make_session) -> None:
    """Bugs caught: an answer cut at max tokens can only be regenerated (the first part lost), or Continue
    asking anew / starting a new turn instead of resuming after the kept thinking and answer."""
    cut = Script(["<think>", "Add them.", "</think>", "The sum is", " one hundred"], finish="length")
    session = make_session(cut, Script([" and one."]))
    first = send(qtbot, session, "Sum of 1..100 over 50?")
    assert first.reason == "length" and session.can_continue
    with qtbot.waitSignal(session.reply_finished, timeout=20_000) as blocker:
        session.continue_answer()
    finished = blocker.args[0]
    engine = session.controller.bridge.engine
    assert engine.resumes[-1] == Resume("answer", "Add them.", "The sum is one hundred")
    assert finished.answer_text == "The sum is one hundred and one." and finished.reason == "stop"
    turn = session.conversation.turns[-1]
    assert len(session.conversation.turns) == 1 and turn.answer == finished.answer_text
    assert session.history.message_row(turn.message_id)["answer_text"] == finished.answer_text
    assert not session.can_continue, "a reply that ended by itself has nothing to continue"
