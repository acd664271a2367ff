"""The prompt's knowledge block: the best passages within the token budget, numbered, with file and place."""

from __future__ import annotations

from pathlib import Path

from app.core.knowledge.context import knowledge_for
from app.core.knowledge.db import knowledge_path
from app.core.knowledge.passages import approx_tokens, pieces
from app.core.knowledge.store import KnowledgeStore
from app.core.knowledge.sync import sync_collection
from tests.core.knowledge.corpus import write_corpus


def indexed(docs: Path, store: KnowledgeStore) -> None:
    write_corpus(docs)
    (docs / "kettles_more.md").write_text("\n\n".join(f"Kettle fact {n}: a kettle boils water. " * 8
                                                      for n in range(12)))
    store.add("notes", [docs])
    sync_collection(knowledge_path(), "notes")


def test_the_block_fits_the_budget_and_numbers_each_passage_with_its_place(docs: Path, store: KnowledgeStore) -> None:
    """Catches a budget counted on the passages' text alone (labels and header pushing the prompt past it), a
    passage without its file or line span (a citation can't open it), and numbers out of rank order."""
    indexed(docs, store)
    for budget in (120, 400, 2_000):
        context = knowledge_for(store, ["notes"], "how fast does a kettle boil water?", token_budget=budget)
        block = context.prompt_block()
        assert context.passages and context.tokens == approx_tokens(block) <= budget, (budget, context.tokens)
        scores = [passage.score for passage in context.passages]
        assert scores == sorted(scores, reverse=True)
        for number, passage in enumerate(context.passages, 1):
            assert f"[{number}] {passage.path.name}, {passage.place} ({passage.path})" in block
            assert passage.place.startswith("line")
    small = knowledge_for(store, ["notes"], "kettle boil water", token_budget=120)
    large = knowledge_for(store, ["notes"], "kettle boil water", token_budget=2_000)
    assert len(small.passages) < len(large.passages)
    assert large.summary() == f"{len(large.passages)} passages, about {large.tokens:,} tokens (BM25)"


def test_a_tokenizer_count_is_used_when_given_and_said(docs: Path, store: KnowledgeStore) -> None:
    """Catches the approximation silently standing in for the model's tokenizer when the caller has one."""
    indexed(docs, store)

    def words(text: str) -> int:  # a stand-in tokenizer: one token a word
        return len(text.split())

    context = knowledge_for(store, ["notes"], "kettle boil", token_budget=300, count_tokens=words)
    assert context.counted_by == "tokenizer" and context.tokens == words(context.prompt_block()) <= 300
    assert "about" not in context.summary()


def test_no_match_no_collection_or_no_budget_gives_an_empty_block(docs: Path, store: KnowledgeStore) -> None:
    """Catches a header with no passages sent to the model, or a crash on a chat without collections."""
    indexed(docs, store)
    for collections, question, budget in ((["notes"], "zyzzyva", 500), ([], "kettle", 500), (["notes"], "kettle", 0),
                                          (["notes"], "kettle", 10)):
        context = knowledge_for(store, collections, question, token_budget=budget)
        assert (context.passages, context.tokens, context.prompt_block()) == ((), 0, ""), (collections, budget)
        assert context.summary() == "no passages found"


def test_passages_keep_their_line_spans(tmp_path: Path) -> None:
    """Catches line spans that drift after blank lines or a cut long line (a citation opening the wrong line)."""
    lines = ["# Title", "", *[f"line {n} " + "word " * 30 for n in range(3, 40)], "", "x" * 5000, "last"]
    text = "\n".join(lines)
    for piece in pieces(text):
        span = lines[piece.line_start - 1:piece.line_end]
        assert piece.text.split("\n")[0] in span[0] and piece.text.split("\n")[-1] in span[-1], piece
        assert len(piece.text) <= 1_200
