"""The conversation list at scale, on a real SQLite file: titles only at start-up, a chat's turns read when it is
shown, and every change told to the views as rows inserted, removed or changed, never a reset."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore
from app.core.chat.history_import import export_json
from app.engine.events import Finished
from app.ui.controllers.conversation_store import ConversationStore


def stored(history: HistoryStore) -> tuple[Conversation, Conversation, Conversation]:
    """Three chats; the first with two tries of its second turn, showing the newer one."""
    branched = Conversation(title="branched", tools=True)
    first = branched.add_turn(Turn("q1", thinking="t1", answer="a1", finish_reason="stop"))
    branched.add_turn(Turn("old q2", answer="old a2", finish_reason="stop"))
    branched.branch_at(1, "new q2").answer = "new a2"
    plain = Conversation(title="plain", turns=[Turn("p", answer="pa", finish_reason="stop")], thinking=False)
    last = Conversation(title="last", turns=[Turn("l", answer="la", finish_reason="stop")])
    history.add_conversations([branched, plain, last])
    assert first.message_id is not None
    return branched, plain, last


def open_store(history: HistoryStore) -> ConversationStore:
    store = ConversationStore(history, busy=lambda: False, new_thinking=lambda: True)
    store.load_history()
    return store


@contextmanager
def never_reset(store: ConversationStore) -> Iterator[None]:
    resets: list[str] = []
    store.model.modelAboutToBeReset.connect(lambda: resets.append("reset"))
    store.model.layoutAboutToBeChanged.connect(lambda: resets.append("layout"))
    yield
    assert resets == [], "the whole list was reloaded"


def test_the_list_holds_titles_until_a_chat_is_shown_and_then_the_same_chat_as_read_whole(qtbot) -> None:
    """Bugs caught: start-up reading every chat's turns (2.9 s for 10,000 chats); a chat shown without its
    turns, or with another branch than it showed; a lazily read chat differing from the one read whole (its
    switches, its branches, its shown leaf)."""
    history = HistoryStore()
    stored(history)
    eager = {c.id: export_json(c) for c in history.conversations()}
    listed = history.conversations(turns=False)
    assert [(c.id, c.title, c.thinking, c.tools, c.tree) for c in listed] == \
        [(c.id, c.title, c.thinking, c.tools, []) for c in history.conversations()]
    store = open_store(history)
    assert [c.title for c in store.model] == ["branched", "plain", "last"]
    assert store.current_row == 2 and store.conversation.turns[0].answer == "la"
    assert store.model[0].tree == [] and store.model[1].tree == [], "only the shown chat is read"
    for row in range(3):
        store.select(row)
        assert export_json(store.conversation) == eager[store.conversation.id]
    assert [t.user for t in store.model[0].turns] == ["q1", "new q2"]
    assert store.model[0].tools and not store.model[1].thinking


def test_a_search_result_in_an_unread_chat_opens_it_on_the_results_branch(qtbot) -> None:
    """Bug caught: a result in a chat not yet read finding no turn (the list holds titles only), so the chat
    opened on its last branch, or not at all."""
    history = HistoryStore()
    branched, _, _ = stored(history)
    old = next(t for t in branched.tree if t.user == "old q2")
    store = open_store(history)
    [hit] = [h for h in history.search("old") if h.message_id is not None]
    assert hit.message_id == old.message_id
    assert store.open_message(branched.id, hit.message_id) == 1
    assert store.current_row == 0 and [t.user for t in store.conversation.turns] == ["q1", "old q2"]
    assert [t.user for t in open_store(HistoryStore(history.path)).read(0).turns] == ["q1", "old q2"]


def test_no_change_reloads_the_whole_list(qtbot) -> None:
    """Bug caught: a new chat, a rename, a turn, a fork, an import or a delete resetting the list model (the
    view rebuilt for 10,000 rows, its scroll place and selection lost) instead of telling it which row changed."""
    history = HistoryStore()
    stored(history)
    store = open_store(history)
    model = store.model
    with never_reset(store), qtbot.waitSignal(model.rowsInserted):
        store.new_conversation()
    with never_reset(store), qtbot.waitSignal(model.dataChanged):
        store.rename("renamed")
    with never_reset(store), qtbot.assertNotEmitted(model.rowsInserted), qtbot.assertNotEmitted(model.rowsRemoved):
        turn = store.add_question("a question")
        store.start_turn(turn.turns[-1])
        store.save_partial("", "partial")
        store.end_turn(Finished(request_id="r", reason="stop", thinking_text="", answer_text="done"), "local")
    with never_reset(store), qtbot.waitSignal(model.rowsInserted):
        store.fork(0)
    with never_reset(store), qtbot.waitSignal(model.dataChanged):
        store.select(0)  # read whole: its row's data changed
    with never_reset(store), qtbot.waitSignal(model.rowsRemoved):
        store.delete_current()
    assert [c.title for c in model] == ["plain", "last", "renamed", "renamed (fork)"]
