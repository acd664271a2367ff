"""Branches in the window, on a real SQLite file: the navigator in the thread, Alt+Left/Right, and what
follows the branch shown (the thread, the live panes, the context gauge, the next request)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QTextBrowser

from app.core.chat.history import HistoryStore
from app.engine.scripted import Script, ScriptedEngineDouble
from app.ui.actions import BY_ID
from app.ui.chat.attachments_bar import branch_tokens, model_counter


def anchor_position(browser: QTextBrowser, href: str) -> int | None:
    """Where in the document the link ``href`` is, or None: the view shows no such link."""
    block = browser.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().isAnchor() and fragment.charFormat().anchorHref() == href:
                return fragment.position()
            it += 1
        block = block.next()
    return None


def click_link(qtbot, browser: QTextBrowser, href: str) -> None:
    """A real mouse click on the link, where the view draws it (not an emitted signal)."""
    position = anchor_position(browser, href)
    assert position is not None, f"no link {href} in the thread: {browser.toPlainText()!r}"
    cursor = QTextCursor(browser.document())
    cursor.setPosition(position + 1)
    browser.setTextCursor(cursor)
    browser.ensureCursorVisible()
    rect = browser.cursorRect(cursor)
    point = rect.center()
    point.setX(max(0, rect.left() - 4))  # inside the link's first character, left of the cursor after it
    QTest.mouseClick(browser.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, point)


def answered(qtbot, window, start) -> None:
    """Run ``start`` and wait for the reply it starts to end."""
    with qtbot.waitSignal(window.reply_finished, timeout=10_000):
        start()


def test_regenerate_keeps_both_replies_and_the_navigator_and_alt_keys_switch_what_follows(qtbot, make_window) -> None:
    """Bugs caught: Regenerate replacing the old reply instead of adding a sibling; no "◀ 2/2 ▶" in the
    thread, or one whose clicks do nothing; Alt+Left/Right not bound to the newest branch point; the live
    panes or the context gauge left on the other branch (the gauge kept the last request's count); the
    next send reading the branch that was answered last instead of the one shown; the shown branch not
    kept in the history file."""
    window = make_window(ScriptedEngineDouble([
        Script(["<think>t1</think>", "the first reply"]),
        Script(["<think>t2</think>", *[f"second{i} " for i in range(40)]]),
        Script(["<think>t3</think>", "a follow-up"])]))
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    answered(qtbot, window, lambda: window.send("2+3?"))
    answered(qtbot, window, window.controls.regenerate_button.click)
    conversation, view = window.session.conversation, window.chat_view
    assert [t.answer for t in conversation.tree] == ["the first reply", "".join(f"second{i} " for i in range(40))]
    assert "◀ 2/2 ▶" in view.transcript.toPlainText()
    assert anchor_position(view.transcript, "nalar-turn:0/next") is None, "the last try's ▶ is no link"
    counter = model_counter(window.controller.settings)
    long_branch = branch_tokens(conversation, counter)

    click_link(qtbot, view.transcript, "nalar-turn:0/prev")
    qtbot.waitUntil(lambda: view.answer_pane.text() == "the first reply", timeout=5_000)
    assert "◀ 1/2 ▶" in view.transcript.toPlainText()
    assert window.gauges.context_bar.value() == branch_tokens(conversation, counter) < long_branch

    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5_000)
    window.prompt.setFocus()
    QTest.keySequence(window.prompt, BY_ID["next_branch"].keys())
    qtbot.waitUntil(lambda: view.answer_pane.text().startswith("second0"), timeout=5_000)
    assert window.gauges.context_bar.value() == long_branch
    QTest.keySequence(window.prompt, BY_ID["previous_branch"].keys())
    qtbot.waitUntil(lambda: view.answer_pane.text() == "the first reply", timeout=5_000)
    assert HistoryStore().conversations()[0].turns[0].answer == "the first reply", "the shown branch is kept"

    answered(qtbot, window, lambda: window.send("and 2+4?"))
    sent = window.controller.bridge.engine.requests[-1]
    assert [m["content"] for m in sent] == ["2+3?", "the first reply", "and 2+4?"]
    assert "second0" not in view.transcript.toPlainText() and "the first reply" in view.transcript.toPlainText()
    window.close()
    [loaded] = HistoryStore().conversations()
    assert [t.answer for t in loaded.turns] == ["the first reply", "a follow-up"] and len(loaded.tree) == 3


def test_an_edited_question_is_a_new_branch_and_up_in_the_empty_prompt_edits_the_last(qtbot, make_window) -> None:
    """Bugs caught: the thread's Edit link not putting the question in the prompt, or the send replacing the
    old turn (or adding the edit after the last one) instead of a sibling at that question; the old branch
    lost or unreachable by the navigator; Up in an empty prompt moving the cursor instead of editing the
    last question; the model reading the question that was edited away; the edit mark left up after the send."""
    window = make_window(ScriptedEngineDouble([Script(["<think>a</think>", "answer one"]),
                                               Script(["<think>b</think>", "answer two"]),
                                               Script(["<think>c</think>", "answer edited"]),
                                               Script(["<think>d</think>", "answer two again"])]))
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    answered(qtbot, window, lambda: window.send("question one"))
    answered(qtbot, window, lambda: window.send("question two"))
    view, prompt, conversation = window.chat_view, window.prompt, window.session.conversation

    click_link(qtbot, view.transcript, "nalar-turn:0/edit")
    qtbot.waitUntil(lambda: prompt.toPlainText() == "question one", timeout=5_000)
    assert window.controls.edit_label.isVisible() and "question 1" in window.controls.edit_label.text()
    prompt.setPlainText("question one, edited")
    answered(qtbot, window, lambda: QTest.keyClick(prompt, Qt.Key.Key_Return))
    assert [t.user for t in conversation.turns] == ["question one, edited"] and conversation.siblings(0) == (1, 2)
    assert view.answer_pane.text() == "answer edited" and not window.controls.edit_label.isVisible()
    assert window.controller.bridge.engine.requests[-1] == [{"role": "user", "content": "question one, edited"}]
    assert "◀ 2/2 ▶" in view.transcript.toPlainText()

    click_link(qtbot, view.transcript, "nalar-turn:0/prev")
    qtbot.waitUntil(lambda: view.answer_pane.text() == "answer two", timeout=5_000)
    assert [t.user for t in conversation.turns] == ["question one", "question two"], "the old branch stays"

    prompt.clear()
    prompt.setFocus()
    QTest.keyClick(prompt, Qt.Key.Key_Up)
    qtbot.waitUntil(lambda: prompt.toPlainText() == "question two", timeout=5_000)
    prompt.setPlainText("question two, again")
    answered(qtbot, window, lambda: QTest.keyClick(prompt, Qt.Key.Key_Return))
    assert conversation.siblings(1) == (1, 2) and conversation.turns[0].user == "question one"
    assert [m["content"] for m in window.controller.bridge.engine.requests[-1]] == [
        "question one", "answer one", "question two, again"]
    window.close()
    [loaded] = HistoryStore().conversations()
    assert sorted(t.user for t in loaded.tree) == ["question one", "question one, edited", "question two",
                                                   "question two, again"]
    assert [t.answer for t in loaded.turns] == ["answer one", "answer two again"]


def test_cancel_edit_and_a_branch_switch_end_the_edit(qtbot, make_window) -> None:
    """Bug caught: an edit left armed after Cancel edit or after another branch is shown, so the next
    question (typed fresh) silently replaced an earlier one as a new branch."""
    window = make_window(ScriptedEngineDouble([Script(["one"]), Script(["two"]), Script(["three"])]))
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    answered(qtbot, window, lambda: window.send("first"))
    answered(qtbot, window, window.controls.regenerate_button.click)
    edit = window.session.question_edit
    window.conversation_actions.edit(0)
    assert edit.index == 0 and window.prompt.toPlainText() == "first"
    window.controls.cancel_edit_button.click()
    assert edit.turn is None and window.prompt.toPlainText() == "" and not window.controls.edit_label.isVisible()
    window.conversation_actions.edit(0)
    assert window.conversation_actions.switch_newest(-1) and edit.turn is None
    answered(qtbot, window, lambda: window.send("second"))
    assert [t.user for t in window.session.conversation.turns] == ["first", "second"]


def test_new_chat_from_here_forks_and_delete_branch_deletes_only_that_branch(qtbot, make_window, monkeypatch) -> None:
    """Bugs caught: "New chat from here" copying the whole tree, or the turns after the chosen one, or
    sharing rows with the source (a later edit in one changed the other); Delete branch deleting the
    whole conversation or the sibling branch, leaving the deleted reply in the panes, or keeping its rows
    (and search hits) in the history file; the thread appending to the wrong branch after a switch to a
    branch one turn longer than the one drawn."""
    from PySide6.QtWidgets import QMessageBox

    window = make_window(ScriptedEngineDouble([Script(["<think>a</think>", "reply one"]),
                                               Script(["<think>b</think>", "reply two"]),
                                               Script(["<think>c</think>", "reply one, again"])]))
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    answered(qtbot, window, lambda: window.send("question one"))
    answered(qtbot, window, lambda: window.send("question two"))
    view = window.chat_view
    source = window.session.conversation

    click_link(qtbot, view.transcript, "nalar-turn:0/fork")
    qtbot.waitUntil(lambda: window.session.conversation is not source, timeout=5_000)
    forked = window.session.conversation
    assert [(t.user, t.answer) for t in forked.tree] == [("question one", "reply one")]
    assert forked.title.endswith("(fork)") and window.conversation_list.count() == 2
    assert view.answer_pane.text() == "reply one" and "question two" not in view.transcript.toPlainText()
    assert all(t.message_id not in {s.message_id for s in source.tree} for t in forked.tree)

    window.conversation_list.select(0)
    qtbot.waitUntil(lambda: window.session.conversation is source, timeout=5_000)
    answered(qtbot, window, lambda: window.conversation_actions.edit(0) or window.send("question one, again"))
    assert source.siblings(0) == (1, 2) and view.answer_pane.text() == "reply one, again"
    click_link(qtbot, view.transcript, "nalar-turn:0/prev")  # to the two-turn branch: the thread is drawn anew
    qtbot.waitUntil(lambda: view.answer_pane.text() == "reply two", timeout=5_000)
    assert view.transcript.toPlainText().count("question one") == 1 and "reply one" in view.transcript.toPlainText()
    gone = [t.message_id for t in source.turns]

    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question", lambda _parent, _title, text: asked.append(text)
                        or QMessageBox.StandardButton.Yes)
    click_link(qtbot, view.transcript, "nalar-turn:0/delete")
    qtbot.waitUntil(lambda: view.answer_pane.text() == "reply one, again", timeout=5_000)
    assert asked and "Its other tries stay" in asked[0]
    assert [t.user for t in source.tree] == ["question one, again"] and source.siblings(0) == (0, 1)
    assert "◀" not in view.transcript.toPlainText() and window.conversation_list.count() == 2
    history = HistoryStore()
    assert all(history.message_row(message_id) == {} for message_id in gone)
    assert [hit.message_id for hit in history.search("two")] == []
    loaded = {c.id: c for c in history.conversations()}
    assert [t.user for t in loaded[source.id].tree] == ["question one, again"]
    assert [t.answer for t in loaded[forked.id].tree] == ["reply one"], "the fork kept its own copy"
