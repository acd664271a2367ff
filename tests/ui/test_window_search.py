"""Search in the window (Ctrl+K) over a real SQLite history: ranked hits, snippets as text, and a result
that opens its conversation at its message, on its branch."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore
from app.engine.scripted import ScriptedEngineDouble
from app.ui.actions import BY_ID
from app.ui.dialogs.search_dialog import SearchDialog


def stored_history() -> tuple[Conversation, Conversation]:
    """A chat with two tries of its second turn (the zebra reply not the one shown), and a newer chat."""
    tree = Conversation(title="Animals", turns=[
        Turn(user="name a big cat", answer="A lion.", finish_reason="stop"),
        Turn(user="and a striped horse?", thinking="ponder stripes", answer="A <b>zebra</b> & <img src=x>",
             finish_reason="stop")])
    tree.branch_at(1, "and a striped horse?").answer = "A quagga, perhaps."
    tree.turns[-1].finish_reason = "stop"
    other = Conversation(title="Cooking", turns=[Turn(user="bread?", answer="Flour and yeast.",
                                                      finish_reason="stop")])
    store = HistoryStore()
    store.add_conversations([tree, other])
    store.close()
    return tree, other


def test_a_search_result_opens_its_conversation_at_its_message_on_its_branch(qtbot, make_window) -> None:
    """Bugs caught: Ctrl+K not bound; a snippet's text read as markup (a model's <img> or <b> drawn, not
    shown); the matched word not marked; thinking searched with the switch off (or not with it on);
    a result opening the conversation on the branch it showed last instead of the one holding the match,
    or not remembering that branch in the history file."""
    tree, _other = stored_history()
    window = make_window(ScriptedEngineDouble())
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    assert window.session.conversation.title == "Cooking"
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5_000)
    QTest.keySequence(window.prompt, BY_ID["search"].keys())
    qtbot.waitUntil(lambda: window.findChild(SearchDialog) is not None, timeout=5_000)
    dialog = window.findChild(SearchDialog)
    qtbot.waitExposed(dialog)

    QTest.keyClicks(dialog.query, "ponder")
    qtbot.waitUntil(lambda: dialog.status.text() == "0 result(s)", timeout=5_000)
    dialog.thinking.setChecked(True)
    qtbot.waitUntil(lambda: len(dialog.hits) == 1, timeout=5_000)
    dialog.thinking.setChecked(False)
    dialog.query.clear()
    QTest.keyClicks(dialog.query, "zebra")
    # Searches run on a worker: the earlier hits stay until these arrive, and the status counts them.
    qtbot.waitUntil(lambda: dialog.status.text() == "1 result(s)", timeout=5_000)
    label = dialog.results.itemWidget(dialog.results.item(0))
    assert "<b>zebra</b>" in label.text() and "&lt;img src=x&gt;" in label.text() and "<img" not in label.text()
    assert "&lt;b&gt;" in label.text(), "the model's own <b> is text"

    QTest.keyClick(dialog.query, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.session.conversation.title == "Animals", timeout=5_000)
    conversation = window.session.conversation
    assert [t.answer for t in conversation.turns] == ["A lion.", "A <b>zebra</b> & <img src=x>"]
    assert window.chat_view.answer_pane.text() == "A <b>zebra</b> & <img src=x>"
    assert "◀ 1/2 ▶" in window.chat_view.transcript.toPlainText()
    assert not dialog.isVisible()
    [loaded] = [c for c in HistoryStore().conversations() if c.id == tree.id]
    assert loaded.turns[-1].answer.startswith("A <b>zebra"), "the branch opened is the one shown next time"
