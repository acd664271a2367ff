"""Retrieval over a corpus the test writes: the right file in the top 3 for questions in other words."""

from __future__ import annotations

from pathlib import Path

from app.core.knowledge.db import knowledge_path
from app.core.knowledge.store import KnowledgeStore
from app.core.knowledge.sync import sync_collection
from tests.core.knowledge.corpus import write_corpus


def test_each_question_finds_its_document_in_the_top_three(docs: Path, store: KnowledgeStore) -> None:
    """Catches a search that needs the text's exact words (no stemming: "boiling" missing "boils"), one that
    requires every word of the question (AND: a question's extra words would match nothing), and a ranking that
    lets the filler every document shares outrank the topic's own words."""
    questions = write_corpus(docs)
    store.add("notes", [docs])
    result = sync_collection(knowledge_path(), "notes")
    assert result.read == 30 and not result.failed, result
    misses = []
    for question, name in questions.items():
        top = [passage.path.name for passage in store.search("notes", question, limit=3)]
        if name not in top:
            misses.append(f"{question!r}: wanted {name}, got {top}")
    assert not misses, "questions whose document was not in the top 3:\n" + "\n".join(misses)


def test_search_spans_several_collections_and_only_those(tmp_path: Path, store: KnowledgeStore) -> None:
    """Catches a search that ignores which collections a chat uses (passages of another collection in the prompt)."""
    for name, text in (("cooking", "Simmer the lentil soup for forty minutes."),
                       ("garden", "Lentils grow well in poor soil."), ("other", "Lentil prices rose this year.")):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.txt").write_text(text)
        store.add(name, [tmp_path / name])
        sync_collection(knowledge_path(), name)
    found = store.search(["cooking", "garden"], "lentils")
    assert sorted(passage.collection for passage in found) == ["cooking", "garden"], found
    assert all(passage.score > 0 for passage in found), "scores must be higher-is-better (bm25 negated)"


def test_a_reopened_store_searches_what_was_indexed(docs: Path) -> None:
    """Catches an index kept in memory or in the history's database instead of its own file under the data dir."""
    write_corpus(docs)
    first = KnowledgeStore(knowledge_path())
    first.add("notes", [docs])
    sync_collection(knowledge_path(), "notes")
    first.close()
    again = KnowledgeStore(knowledge_path())
    try:
        assert again.search("notes", "espresso pressure")[0].path.name == "coffee.txt"
        assert knowledge_path().name == "knowledge.sqlite3" and knowledge_path().stat().st_mode & 0o777 == 0o600
    finally:
        again.close()
