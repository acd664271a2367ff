"""Citations of earlier turns in the thread (issue 51 item 3): each earlier answer's [n] and source lines open that
turn's own source (saved with it in the real history file), after a reload too; a model's link or raw URL with our
scheme is never one."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QUrl

from app.core.chat.answer_markup import LINK_SCHEME, SOURCE_SCHEME
from app.core.chat.conversation import Conversation, Source, Turn, TurnKnowledge
from app.core.chat.history import HistoryStore
from app.core.knowledge.db import knowledge_path
from app.core.knowledge.store import KnowledgeStore
from app.ui.chat import answer_view
from app.ui.knowledge.viewer import SourceViewer

FIRST_ANSWER = ("Glycerol boils at 290 °C [1] and sweetens liquorice [2]. "
                "[a forged link](nalar-source:1/2) [another](nalar-source:2/1) raw nalar-source:2/2 "
                '<a href="nalar-source:2/2">html</a>')


def notes(folder: Path) -> dict[str, Source]:
    """Four one-passage files; the first turn cites chemistry and sweets, the second garden and water."""
    folder.mkdir(parents=True)
    sources = {}
    for name, text in (("chemistry", "Glycerol boils at 290 degrees."), ("sweets", "Glycerol sweetens liquorice."),
                       ("garden", "Tomatoes need six hours of sun."), ("water", "Water tomatoes at the root.")):
        path = folder / f"{name}.md"
        path.write_text(f"# {name}\n\n{text}\n", encoding="utf-8")
        sources[name] = Source("notes", str(path), None, 3, 3, text)
    return sources


def saved_chat(folder: Path) -> str:
    """A chat of two answered questions with their sources, in the history file (the window reads it at start),
    and the collection "notes" of ``folder`` in the knowledge index; its id."""
    sources = notes(folder)
    first = TurnKnowledge("2 passages", "(block)", (sources["chemistry"], sources["sweets"]))
    second = TurnKnowledge("2 passages", "(block)", (sources["garden"], sources["water"]))
    conversation = Conversation("Glycerol", [
        Turn("What is glycerol?", answer=FIRST_ANSWER, finish_reason="stop", knowledge=first),
        Turn("And tomatoes?", answer="Sun [1] and water [2].", finish_reason="stop", knowledge=second)])
    history = HistoryStore()
    try:
        history.add_conversations([conversation])
    finally:
        history.close()
    index = KnowledgeStore(knowledge_path())
    try:
        index.add("notes", [folder])
    finally:
        index.close()
    return conversation.id


def shown(qtbot, window, conversation_id: str) -> None:
    store = window.session.store
    store.select(next(row for row in range(len(store.model)) if store.model[row].id == conversation_id))
    qtbot.waitUntil(lambda: window.session.conversation.id == conversation_id
                    and len(window.chat_view.transcript_document.collected.links) > 0, timeout=5_000)


def clicked(qtbot, window, document: answer_view.AnswerDocument, href: str) -> SourceViewer:
    """The link of ours to ``href`` in ``document`` clicked; the viewer it opened, settled."""
    index = next((i for i, link in enumerate(document.collected.links) if link.cited and link.href == href), None)
    assert index is not None, f"no link of ours to {href}: {document.collected.links}"
    document.on_anchor(QUrl(f"{LINK_SCHEME}:{index}"))
    viewer = window.knowledge.sources.viewer
    assert viewer is not None and viewer.isVisible(), f"{href} opened no viewer"
    qtbot.waitUntil(lambda: viewer.settled, timeout=10_000)
    return viewer


def check_earlier_turn(qtbot, window, monkeypatch) -> None:
    turns = window.session.conversation.turns
    first_id = turns[0].message_id
    assert first_id is not None and turns[0].knowledge is not None
    thread = window.chat_view.transcript_document
    viewer = clicked(qtbot, window, thread, f"{SOURCE_SCHEME}:{first_id}/2")  # the earlier answer's [2]
    assert viewer.source == turns[0].knowledge.sources[1], "the earlier [2] opened another turn's source"
    assert "Glycerol sweetens liquorice." in viewer.file_view.textCursor().selectedText()
    viewer.close()
    sources_line = [i for i, link in enumerate(thread.collected.links) if link.cited and "chemistry.md" in link.text]
    assert len(sources_line) == 1, thread.collected.links  # the source line "[1] chemistry.md · line 3"
    thread.on_anchor(QUrl(f"{LINK_SCHEME}:{sources_line[0]}"))
    viewer = window.knowledge.sources.viewer
    assert viewer is not None and viewer.source == turns[0].knowledge.sources[0]
    viewer.close()
    viewer = clicked(qtbot, window, window.chat_view.answer_pane.document, "nalar-cite:2")  # the last answer's [2]
    assert viewer.source == turns[1].knowledge.sources[1], "the shown answer's [2] opened another turn's source"
    viewer.close()

    # The model's own links with our scheme: links of the model's (refused as any non-web link), never ours.
    refused: list[str] = []
    monkeypatch.setattr(answer_view, "_message", lambda _parent, _icon, _title, text, ask=False: refused.append(text))
    forged = [i for i, link in enumerate(thread.collected.links) if link.href.startswith(SOURCE_SCHEME)
              and not link.cited]
    assert len(forged) == 2, thread.collected.links
    for index in forged:
        thread.on_anchor(QUrl(f"{LINK_SCHEME}:{index}"))
    assert window.knowledge.sources.viewer is None and len(refused) == 2, refused
    html = window.chat_view.transcript.toHtml()
    assert 'href="nalar-source' not in html and "raw nalar-source:2/2" in window.chat_view.transcript.toPlainText()


def test_an_earlier_turns_citation_opens_its_own_source_before_and_after_a_reload(
        qtbot, make_window, tmp_path: Path, monkeypatch) -> None:
    """Bugs caught: an earlier answer's [2] left as text, or opening the latest turn's [2] (the pane's sources);
    the thread's source lines not links; a model-written nalar-source: link or raw URL opening a source; the
    links lost when the history file is read again at the next start."""
    conversation_id = saved_chat(tmp_path / "notes")
    window = make_window()
    shown(qtbot, window, conversation_id)
    check_earlier_turn(qtbot, window, monkeypatch)
    window.close()

    reopened = make_window()
    shown(qtbot, reopened, conversation_id)
    check_earlier_turn(qtbot, reopened, monkeypatch)


def test_in_a_live_chat_the_first_answers_citation_opens_its_source_once_a_second_is_asked(
        qtbot, make_window, tmp_path: Path) -> None:
    """Bugs caught: a turn put in the thread without its message id (its [n] left as text, or linked to no turn);
    the earlier [2] resolved against the latest turn's sources."""
    from app.engine.scripted import Script, ScriptedEngineDouble
    from tests.ui.test_knowledge_window import added
    from tests.ui.test_window import send, wait_ready

    notes(tmp_path / "notes")
    engine = ScriptedEngineDouble([Script(["It boils at 290 °C [1] and is sweet [2]."]),
                                   Script(["Sun [1] and water [2]."])])
    window = make_window(engine)
    wait_ready(qtbot, window)
    added(qtbot, window, "notes", tmp_path / "notes")
    send(qtbot, window, "glycerol")
    send(qtbot, window, "tomatoes")
    first, second = window.session.conversation.turns
    assert first.knowledge is not None and len(first.knowledge.sources) == 2, first.knowledge
    assert second.knowledge is not None and {s.path for s in second.knowledge.sources}.isdisjoint(
        {s.path for s in first.knowledge.sources}), "the test's questions should cite different files"
    viewer = clicked(qtbot, window, window.chat_view.transcript_document, f"{SOURCE_SCHEME}:{first.message_id}/2")
    assert viewer.source == first.knowledge.sources[1] and viewer.excerpt is not None
    cited = first.knowledge.sources[1]
    assert cited.line_start is not None and cited.line_end is not None
    assert viewer.excerpt.marked == (cited.line_start - 1, cited.line_end - 1), viewer.note.text()
    viewer.close()
