"""Full-text search over the history: SQLite FTS5 on titles, questions, answers and (a switch) thinking.

The index tables are external-content FTS5 tables kept in step by triggers, so every write (a partial save
while a reply streams included) updates them in the same transaction, whichever code path made it.
Titles are ranked by FTS5's bm25(); turns by BM25 among their newest matches (``_turns`` says why).
Snippets mark the matched words with ``MARK_START`` and ``MARK_END``, control characters no text
contains, so a view escapes the text first and then turns the marks into highlights.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

MARK_START, MARK_END = "\x02", "\x03"
SNIPPET_TOKENS = 12
CANDIDATES = 300  # turns ranked per search: the newest that match (all of them, for a rarer word)
MARKED_SPAN = re.compile(f"{MARK_START}(.*?){MARK_END}", re.DOTALL)

FTS_SCHEMA = (
    "CREATE VIRTUAL TABLE message_search USING fts5(user_text, answer_text, thinking_text, content='messages', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    "CREATE VIRTUAL TABLE title_search USING fts5(title, content='conversations', content_rowid='rowid', "
    "tokenize='unicode61 remove_diacritics 2')",
    "CREATE TRIGGER message_search_insert AFTER INSERT ON messages BEGIN INSERT INTO message_search "
    "(rowid, user_text, answer_text, thinking_text) VALUES (new.id, new.user_text, new.answer_text, "
    "new.thinking_text); END",
    "CREATE TRIGGER message_search_delete AFTER DELETE ON messages BEGIN INSERT INTO message_search "
    "(message_search, rowid, user_text, answer_text, thinking_text) VALUES ('delete', old.id, old.user_text, "
    "old.answer_text, old.thinking_text); END",
    "CREATE TRIGGER message_search_update AFTER UPDATE OF user_text, answer_text, thinking_text ON messages BEGIN "
    "INSERT INTO message_search (message_search, rowid, user_text, answer_text, thinking_text) VALUES ('delete', "
    "old.id, old.user_text, old.answer_text, old.thinking_text); INSERT INTO message_search (rowid, user_text, "
    "answer_text, thinking_text) VALUES (new.id, new.user_text, new.answer_text, new.thinking_text); END",
    "CREATE TRIGGER title_search_insert AFTER INSERT ON conversations BEGIN INSERT INTO title_search "
    "(rowid, title) VALUES (new.rowid, new.title); END",
    "CREATE TRIGGER title_search_delete AFTER DELETE ON conversations BEGIN INSERT INTO title_search "
    "(title_search, rowid, title) VALUES ('delete', old.rowid, old.title); END",
    "CREATE TRIGGER title_search_update AFTER UPDATE OF title ON conversations BEGIN INSERT INTO title_search "
    "(title_search, rowid, title) VALUES ('delete', old.rowid, old.title); INSERT INTO title_search (rowid, title) "
    "VALUES (new.rowid, new.title); END",
)


def add_search_index(db: sqlite3.Connection) -> None:
    """7 -> 8 (and a new file): the index tables and triggers, built from what is already stored."""
    for statement in FTS_SCHEMA:
        db.execute(statement)
    db.execute("INSERT INTO message_search (message_search) VALUES ('rebuild')")
    db.execute("INSERT INTO title_search (title_search) VALUES ('rebuild')")


@dataclass(frozen=True)
class SearchHit:
    """One result: the conversation, the turn matched (None for a title match), and a marked snippet."""

    conversation_id: str
    title: str
    message_id: int | None
    snippet: str
    rank: float  # bm25: lower is better

    def marked(self, start: str, end: str) -> str:
        return self.snippet.replace(MARK_START, start).replace(MARK_END, end)


def match_expression(query: str, columns: tuple[str, ...] | None = None, *, prefix: bool = True) -> str:
    """The user's words as an FTS5 query: each a quoted phrase (so ``"``, ``*``, ``-``, ``OR`` and ``:`` are
    just text), all required, the last one also as a prefix (results while the word is being typed)."""
    words = ['"' + word.replace('"', '""') + '"' for word in query.split()]
    if not words:
        return ""
    if prefix:
        words[-1] += "*"
    expression = " ".join(words)
    return f"{{{' '.join(columns)}}} : ({expression})" if columns else expression


def search(db: sqlite3.Connection, query: str, *, thinking: bool = False, limit: int = 50) -> list[SearchHit]:
    """Titles first (a chat's name is what a user remembers), then turns, each group best first."""
    if not (titles := match_expression(query)):
        return []
    hits = [SearchHit(row[0], row[1], None, row[2], row[3]) for row in db.execute(
        f"SELECT c.id, c.title, snippet(title_search, 0, '{MARK_START}', '{MARK_END}', '…', {SNIPPET_TOKENS}), "
        "bm25(title_search) AS rank FROM title_search JOIN conversations c ON c.rowid = title_search.rowid "
        "WHERE title_search MATCH ? ORDER BY rank LIMIT ?", (titles, limit))]
    return (hits + _turns(db, query, thinking, limit))[:limit]


def _turns(db: sqlite3.Connection, query: str, thinking: bool, limit: int) -> list[SearchHit]:
    """The newest CANDIDATES turns that match, ranked by BM25 here. FTS5's bm25() first counts, for each word,
    every row holding it (its IDF), and a snippet needs the word's whole doclist: 0.5-1 s for a word in most
    of 200,000 turns, however few rows are ranked. The words as typed are tried first; the last one is taken
    as a prefix (a word being typed) only when they match fewer than CANDIDATES turns, since expanding a
    prefix reads its whole doclist too."""
    columns = ("user_text", "answer_text", "thinking_text") if thinking else ("user_text", "answer_text")
    rows: list[tuple[int, str, str, str, str, str]] = []
    for prefix in (False, True):
        rows = db.execute(
            f"SELECT m.id, m.conversation_id, c.title, {', '.join(_marked(n) for n in range(len(columns)))} "
            "FROM message_search JOIN messages m ON m.id = message_search.rowid "
            "JOIN conversations c ON c.id = m.conversation_id WHERE message_search MATCH ? "
            "ORDER BY message_search.rowid DESC LIMIT ?",
            (match_expression(query, columns, prefix=prefix), CANDIDATES)).fetchall()
        if len(rows) >= CANDIDATES:
            break
    scored = [(_words(row[3:]), row) for row in rows]
    mean = sum(length for (_, length), _ in scored) / len(scored) if scored else 1.0
    ranked = sorted(((-_bm25(found, length, mean), row) for (found, length), row in scored), key=lambda s: s[0])
    return [SearchHit(row[1], row[2], row[0], _snippet(row[3:]), rank) for rank, row in ranked[:limit]]


def _marked(column: int) -> str:
    return f"highlight(message_search, {column}, '{MARK_START}', '{MARK_END}')"


def _words(texts: tuple[str, ...]) -> tuple[int, int]:
    """Words matched (inside the marks) and words in all, over the searched columns, split at white space
    (a regex's \\w+ took 40 ms per search for 500 rows)."""
    marked = sum(len(span.split()) for text in texts for span in MARKED_SPAN.findall(text))
    return marked, sum(len(text.split()) for text in texts)


def _bm25(found: int, length: int, mean: float, k1: float = 1.2, b: float = 0.75) -> float:
    """FTS5's bm25 for one row, without the IDF factor: every candidate holds every word (all are required),
    so IDF only weighs one word against another, and knowing it costs a pass over each word's doclist."""
    return found * (k1 + 1) / (found + k1 * (1 - b + b * length / max(mean, 1.0)))


def _snippet(texts: tuple[str, ...]) -> str:
    """About SNIPPET_TOKENS words of the column with most matches, from just before its first match."""
    text = max(texts, key=lambda t: t.count(MARK_START))
    words = text.split()
    first = next((n for n, word in enumerate(words) if MARK_START in word), 0)
    start = max(0, min(first - 2, len(words) - SNIPPET_TOKENS))
    part = " ".join(words[start:start + SNIPPET_TOKENS])
    if part.rfind(MARK_END) < part.rfind(MARK_START):  # a match cut by the window's end
        part += MARK_END
    if part.find(MARK_END) < part.find(MARK_START) or (MARK_END in part and MARK_START not in part):
        part = MARK_START + part
    return ("…" if start else "") + part + ("…" if start + SNIPPET_TOKENS < len(words) else "")
