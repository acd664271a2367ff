"""Knowledge in the window (issue 51), with the scripted engine double answering and a real index (SQLite FTS5 in
the test's data dir) over folders the tests write: a folder added through Knowledge…, a question whose answer is
in one file reaches the model with that file's passage, the answer's [1] opens that file at its place, an edit
synced is what the next question reads, the budget is held, a reload shows the same sources, and the sync runs
through the one runner, never on the GUI thread."""

from __future__ import annotations

import threading
from pathlib import Path

from PySide6.QtCore import QTimer, QUrl
from PySide6.QtGui import QDesktopServices

from app.core.chat.answer_markup import CITE_SCHEME, LINK_SCHEME
from app.core.chat.history import HistoryStore
from app.core.knowledge.sync import SyncProgress
from app.core.settings.settings import EngineConfig, SamplingConfig, Settings
from app.engine.scripted import Script, ScriptedEngineDouble
from app.ui.chat.attachments_bar import context_fit, model_counter
from app.ui.controllers.operations import runner
from app.ui.knowledge import dialog as dialog_module
from app.ui.knowledge.asking import knowledge_budget
from app.ui.knowledge.dialog import KnowledgeDialog
from tests.ui.test_window import send, wait_ready

GLYCEROL = "Glycerol boils at 290 degrees Celsius and is used to sweeten liquorice."
FILLER = ("The weekly report lists the meetings, the budget lines and the rota for the kitchen. " * 3).strip()


def write_notes(folder: Path) -> Path:
    """Three notes; the answer to the question below is in ``chemistry.md`` alone, on its line 3."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meetings.md").write_text(f"# Meetings\n\n{FILLER}\n", encoding="utf-8")
    (folder / "garden.txt").write_text("Tomatoes need six hours of sun and water at the root.\n", encoding="utf-8")
    target = folder / "chemistry.md"
    target.write_text(f"# Chemistry notes\n\n{GLYCEROL}\n", encoding="utf-8")
    return target


def added(qtbot, window, name: str, folder: Path) -> KnowledgeDialog:
    """Knowledge… from the menu, a new collection of ``folder``, synced; the chat then asks over it."""
    window.menus.trigger("knowledge")
    dialog = window.knowledge.dialog
    assert dialog is not None and dialog.isVisible(), "Knowledge… opened no dialog"
    with qtbot.waitSignal(dialog.synced, timeout=30_000):
        assert dialog.new_collection(name, folder) is not None, dialog.status.text()
    window.knowledge.choose(name, True)
    return dialog


def cite_link(window, number: int) -> QUrl:
    """The answer pane's link for citation [number], as the rendered answer numbers it."""
    links = window.chat_view.answer_pane.document.collected.links
    index = next((i for i, link in enumerate(links) if link.href == f"{CITE_SCHEME}:{number}"), None)
    assert index is not None, f"no [{number}] link in the answer: {links}"
    return QUrl(f"{LINK_SCHEME}:{index}")


def test_a_question_answered_from_one_file_reaches_the_model_with_it_and_its_citation_opens_that_file(
        qtbot, make_window, tmp_path: Path, monkeypatch) -> None:
    """Bugs caught: the passages not reaching the prompt (or after the question); the wrong file's passage; the
    answer's [1] left as text, or opening another file or place than the passage's; a source opened outside
    the collection's folders; the sources lost on a reload; the chat's collections not kept with it."""
    engine = ScriptedEngineDouble([Script(["<think>the notes say 290</think>", "Glycerol boils at 290 °C [1]."])])
    window = make_window(engine)
    wait_ready(qtbot, window)
    target = write_notes(tmp_path / "notes")
    dialog = added(qtbot, window, "notes", tmp_path / "notes")
    table = [dialog.table.item(0, column).text() for column in range(dialog.table.columnCount())]
    assert table[0] == "notes" and table[2] == "3" and table[5] != "never", table
    assert window.knowledge.chip.text() == "Knowledge: notes"
    send(qtbot, window, "At what temperature does glycerol boil?")
    question = engine.requests[-1][-1]["content"]
    assert GLYCEROL in question and str(target) in question and "[1]" in question, question
    assert question.endswith("At what temperature does glycerol boil?"), "the passages go before the question"
    assert FILLER not in question, "a file without the answer was put in the prompt"
    turn = window.session.conversation.turns[-1]
    assert turn.knowledge is not None and turn.knowledge.sources[0].path == str(target)
    sources = window.knowledge.sources
    assert sources.isVisible() and "chemistry.md" in sources.label.text() and "BM25" in sources.label.text()

    opened: list[QUrl] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(lambda url: opened.append(url) or True))
    window.chat_view.answer_pane.document.on_anchor(cite_link(window, 1))
    viewer = sources.viewer
    assert viewer is not None and viewer.isVisible(), "the answer's [1] opened no viewer"
    source = turn.knowledge.sources[0]
    assert source.line_start <= 3 <= source.line_end, "the passage's lines don't hold the answer's line 3"
    assert str(target) in viewer.where.text() and source.place in viewer.where.text(), viewer.where.text()
    qtbot.waitUntil(lambda: viewer.settled, timeout=10_000)
    assert GLYCEROL in viewer.file_view.textCursor().selectedText() and viewer.passage.toPlainText() == source.text
    viewer.open_button.click()
    assert opened == [QUrl.fromLocalFile(str(target.resolve()))], opened
    viewer.close()

    conversation_id = window.session.conversation.id
    window.session.store.new_conversation()
    qtbot.waitUntil(lambda: not sources.isVisible(), timeout=5_000)
    assert window.knowledge.chip.text() == "Knowledge: off", "a new chat took the other chat's collections"
    window.session.store.select(next(row for row in range(len(window.session.store.model))
                                     if window.session.store.model[row].id == conversation_id))
    qtbot.waitUntil(lambda: sources.isVisible(), timeout=5_000)
    assert "chemistry.md" in sources.label.text() and window.knowledge.chip.text() == "Knowledge: notes"
    reread = HistoryStore(window.session.history.path, owner=False)
    try:
        stored = next(c for c in reread.conversations() if c.id == conversation_id)
    finally:
        reread.close()
    assert stored.turns[-1].knowledge == turn.knowledge and stored.settings.values.knowledge == ("notes",)


def test_an_edited_file_synced_is_what_the_next_question_reads(qtbot, make_window, tmp_path: Path) -> None:
    """Bug caught: a sync after an edit leaving the old passage in the index, or the window asking with the
    passages of an earlier question (or of the earlier turn) instead of looking up again."""
    engine = ScriptedEngineDouble([Script(["290 °C [1]."]), Script(["295 °C [1]."])])
    window = make_window(engine)
    wait_ready(qtbot, window)
    target = write_notes(tmp_path / "notes")
    dialog = added(qtbot, window, "notes", tmp_path / "notes")
    send(qtbot, window, "At what temperature does glycerol boil?")
    edited = "Glycerol boils at 295 degrees Celsius, the corrected figure from the new handbook."
    target.write_text(f"# Chemistry notes\n\n{edited}\n", encoding="utf-8")
    with qtbot.waitSignal(dialog.synced, timeout=30_000) as synced:
        dialog.sync("notes")
    assert synced.args[0].read == 1 and synced.args[0].unchanged == 2, synced.args[0]
    send(qtbot, window, "What is the boiling temperature of glycerol?")
    question = engine.requests[-1][-1]["content"]
    assert edited in question and "290 degrees" not in question, question
    earlier = [m["content"] for m in engine.requests[-1][:-1] if m["role"] == "user"]
    assert earlier == ["At what temperature does glycerol boil?"], "an earlier turn's passages went again"


def test_the_passages_keep_within_the_context_left(qtbot, make_window, tmp_path: Path) -> None:
    """Bug caught: every matching passage put in whatever the context (a question then refused by the engine,
    or the reply's room eaten), or a budget that ignores the conversation so far."""
    settings = Settings(engine=EngineConfig(max_model_len=1024), sampling=SamplingConfig(think_budget=64,
                                                                                         max_tokens=128))
    engine = ScriptedEngineDouble([Script(["First."]), Script(["Second."])])
    window = make_window(engine, settings)
    wait_ready(qtbot, window)
    folder = tmp_path / "notes"
    folder.mkdir()
    for n in range(30):
        (folder / f"glycerol-{n:02}.md").write_text(
            f"Note {n}: glycerol " + " ".join(f"word{n}x{k}" for k in range(60)) + "\n", encoding="utf-8")
    added(qtbot, window, "notes", folder)
    send(qtbot, window, "Tell me about glycerol, at length. " * 20)
    question = "And glycerol again?"
    counter = model_counter(settings)
    budget = knowledge_budget(context_fit(settings, window.session.conversation, question, counter))
    assert 0 < budget < 900, budget
    send(qtbot, window, question)
    knowledge = window.session.conversation.turns[-1].knowledge
    assert knowledge is not None and 0 < len(knowledge.sources) < 30, "the budget didn't cut anything"
    assert counter.count(knowledge.block) <= budget, (counter.count(knowledge.block), budget)
    shown = window.knowledge.sources.label.text()
    assert f"{len(knowledge.sources)} passage" in shown and f"of {budget:,} left" in shown, shown
    assert knowledge.budget == budget


def test_a_sync_runs_through_the_runner_with_progress_and_cancel_while_the_window_goes_on(
        qtbot, make_window, tmp_path: Path, monkeypatch) -> None:
    """Bug caught: the sync run on the GUI thread (the window frozen for a whole index), progress delivered
    once per file (thousands of repaints) or never, and Cancel not reaching the worker."""
    window = make_window()
    wait_ready(qtbot, window)
    write_notes(tmp_path / "notes")
    release, started = threading.Event(), threading.Event()
    ran_on: list[str] = []
    real_sync = dialog_module.sync_collection

    def held_sync(store_path, name, *, on_progress=None, cancelled=lambda: False,  # type: ignore[no-untyped-def]
                  embedder=None):
        ran_on.append(threading.current_thread().name)
        assert embedder is not None and embedder.name == "all-MiniLM-L6-v2", "the dialog's model not handed on"
        for done in range(500):  # a burst of progress: the relay passes few of them
            on_progress(SyncProgress(done, 500, f"file-{done}.md", done))
        started.set()
        assert release.wait(30), "hang guard"
        assert cancelled(), "Cancel never reached the worker"
        return real_sync(store_path, name, on_progress=on_progress, cancelled=cancelled, embedder=embedder)

    monkeypatch.setattr(dialog_module, "sync_collection", held_sync)
    window.menus.trigger("knowledge")
    dialog = window.knowledge.dialog
    shown: list[int] = []
    dialog.relay.progressed.connect(lambda progress: shown.append(progress.files_done))
    operation = dialog.new_collection("notes", tmp_path / "notes")
    assert operation is not None and operation in runner().live and operation.thread is not None
    ticks: list[int] = []
    timer = QTimer(window, interval=10)
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start()
    qtbot.waitUntil(lambda: started.is_set() and len(ticks) >= 5, timeout=10_000)  # the GUI loop runs on
    timer.stop()
    assert ran_on and ran_on[0] != threading.main_thread().name, ran_on
    assert not dialog.sync_button.isEnabled() and dialog.cancel_button.isEnabled()
    qtbot.waitUntil(lambda: 499 in shown, timeout=5_000)
    assert len(shown) < 50, f"{len(shown)} progress signals for 500 reports: not throttled"
    assert dialog.progress.maximum() == 500
    dialog.cancel_button.click()
    with qtbot.waitSignal(dialog.synced, timeout=30_000):
        release.set()
    assert dialog.status.text().startswith("Cancelled"), dialog.status.text()
    assert dialog.sync_button.isEnabled()


def test_the_dialog_lists_skipped_files_with_reasons_adds_a_folder_and_removes_a_collection(
        qtbot, make_window, tmp_path: Path) -> None:
    """Bugs caught: skipped files not shown (the user can't tell why a file never answers), a name or path from
    the files shown as markup, Add folder replacing the collection's folders, Remove leaving the chat asking a
    collection that is gone without a word."""
    engine = ScriptedEngineDouble([Script(["No notes on that."])])
    window = make_window(engine)
    wait_ready(qtbot, window)
    notes = tmp_path / "notes"
    write_notes(notes)
    (notes / "<b>bold.txt").write_bytes(b"\x00\x01binary\x00" * 100)
    dialog = added(qtbot, window, "notes", notes)
    assert dialog.skipped.count() == 1
    line = dialog.skipped.item(0).text()
    assert "<b>bold.txt" in line and "binary" in line, line
    more = tmp_path / "more"
    more.mkdir()
    (more / "tea.md").write_text("Green tea steeps at 80 degrees for two minutes.\n", encoding="utf-8")
    with qtbot.waitSignal(dialog.synced, timeout=30_000):
        assert dialog.add_folder(more) is not None
    assert dialog.table.item(0, 1).text().count(";") == 1 and dialog.table.item(0, 2).text() == "4"
    assert dialog.remove("notes", ask=False) and dialog.table.rowCount() == 0
    send(qtbot, window, "How hot should green tea be?")
    assert "Knowledge not used" in window.knowledge.sources.label.text() and "notes" in \
        window.knowledge.sources.label.text(), window.knowledge.sources.label.text()
    assert "80 degrees" not in engine.requests[-1][-1]["content"]


def test_a_preset_naming_collections_gives_them_to_the_chat_that_takes_it(qtbot, make_window, tmp_path: Path) -> None:
    """Bug caught: a preset's collections not reaching the chat (or reaching every chat), and an earlier
    answer's sources missing from the thread once a newer question is asked."""
    from app.core.settings.settings import Preset, PresetsConfig, changed

    engine = ScriptedEngineDouble([Script(["290 °C [1]."]), Script(["Noted."])])
    window = make_window(engine)
    wait_ready(qtbot, window)
    write_notes(tmp_path / "notes")
    dialog = added(qtbot, window, "notes", tmp_path / "notes")
    dialog.close()
    window.knowledge.choose("notes", False)
    assert window.knowledge.chip.text() == "Knowledge: off"
    controller = window.controller
    presets = PresetsConfig(presets=(*controller.settings.presets.presets, Preset(name="Lab", knowledge=("notes",))))
    controller.apply_settings(changed(controller.settings, presets=presets.model_dump()))
    window.chat_settings.choose_preset("Lab")
    assert window.knowledge.chip.text() == "Knowledge: notes"
    send(qtbot, window, "At what temperature does glycerol boil?")
    assert GLYCEROL in engine.requests[-1][-1]["content"]
    send(qtbot, window, "Thanks, and anything on tomatoes?")
    thread = window.chat_view.transcript.toPlainText()
    assert "Sources: [1] chemistry.md" in thread, thread


def test_an_index_from_a_newer_nalar_is_named_and_the_question_goes_without(qtbot, make_window) -> None:
    """Bug caught: an index the window can't open (a newer Nalar's schema) raising inside the dialog, the chip's
    menu or the send, instead of saying what is wrong and letting the question go without passages."""
    import sqlite3

    from app.core.knowledge.db import knowledge_path

    engine = ScriptedEngineDouble([Script(["Without notes."])])
    window = make_window(engine)
    wait_ready(qtbot, window)
    path = knowledge_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    window.menus.trigger("knowledge")
    dialog = window.knowledge.dialog
    assert "newer Nalar" in dialog.status.text() and dialog.table.rowCount() == 0, dialog.status.text()
    assert window.knowledge.names() == []
    window.knowledge.choose("notes", True)  # a preset or an older chat may name one
    send(qtbot, window, "Anything on glycerol?")
    assert "Knowledge not used" in window.knowledge.sources.label.text(), window.knowledge.sources.label.text()
    assert engine.requests[-1][-1]["content"] == "Anything on glycerol?"


def test_the_dialog_says_which_ranking_and_a_question_is_ranked_so(qtbot, make_window, tmp_path: Path) -> None:
    """Bugs caught: the window not saying which ranking it uses or which model; a sync that doesn't embed (or
    does it on the GUI thread: the runner's worker is the only caller), or whose last progress report, delivered
    after it ended, replaces the result line; a question's summary saying BM25 when
    the vectors ranked it, or hybrid once the model is turned off; a broken folder chosen silently."""
    engine = ScriptedEngineDouble([Script(["Glycerol boils at 290 °C [1]."]), Script(["290 °C [1]."])])
    window = make_window(engine)
    wait_ready(qtbot, window)
    write_notes(tmp_path / "notes")
    window.menus.trigger("knowledge")
    dialog = window.knowledge.dialog
    assert dialog.ranking.label.text() == "Ranking: hybrid, BM25 + all-MiniLM-L6-v2 (installed package)"
    embedding: list[tuple[int, int]] = []
    dialog.relay.progressed.connect(lambda p: embedding.append((p.embedded, p.to_embed))
                                    if p.phase == "embedding" else None)
    with qtbot.waitSignal(dialog.synced, timeout=60_000):
        dialog.new_collection("notes", tmp_path / "notes")
    qtbot.waitUntil(lambda: embedding[-1:] == [(3, 3)], timeout=5_000)  # the relay's latest comes within 100 ms
    assert dialog.status.text().endswith("3 embedded."), "a late progress report hid the result"
    window.knowledge.choose("notes", True)
    send(qtbot, window, "At what temperature does glycerol boil?")
    knowledge = window.session.conversation.turns[-1].knowledge
    assert knowledge is not None and knowledge.summary.endswith("(hybrid: BM25 + all-MiniLM-L6-v2)"), knowledge
    assert [Path(source.path).name for source in knowledge.sources] == ["chemistry.md"], "unrelated passages went in"
    broken = tmp_path / "not-a-model"
    broken.mkdir()
    dialog.ranking.choose(broken)
    assert f"Not chosen: the embedding model folder {broken} has no config.json" in dialog.ranking.label.text()
    assert dialog.ranking.choice.embedder is not None, "a broken folder replaced the working model"
    dialog.ranking.store("off")
    assert dialog.ranking.label.text().startswith("Ranking: BM25 — the embedding model is turned off")
    send(qtbot, window, "And glycerol?")
    knowledge = window.session.conversation.turns[-1].knowledge
    assert knowledge is not None and knowledge.summary.endswith("(BM25)"), knowledge
