"""Full-text search over the history: SQLite FTS5 on titles, questions, answers and (a switch) thinking.

The index tables are external-content FTS5 tables kept in step by triggers, so every write (a partial save
while a reply streams included) updates them in the same transaction, whichever code path made it.
Results are ranked by bm25; snippets mark the matched words with ``MARK_START`` and ``MARK_END``, control
characters no text contains, so a view escapes the text first and then turns the marks into highlights.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

MARK_START, MARK_END = "\x02", "\x03"
SNIPPET_TOKENS = 12

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


def match_expression(query: str, columns: tuple[str, ...] | None = None) -> str:
    """The user's words as an FTS5 query: each a quoted phrase (so ``"``, ``*``, ``-``, ``OR`` and ``:`` are
    just text), all required, the last one also as a prefix (results while the word is being typed)."""
    words = ['"' + word.replace('"', '""') + '"' for word in query.split()]
    if not words:
        return ""
    words[-1] += "*"
    expression = " ".join(words)
    return f"{{{' '.join(columns)}}} : ({expression})" if columns else expression


def search(db: sqlite3.Connection, query: str, *, thinking: bool = False, limit: int = 50) -> list[SearchHit]:
    """Titles first (a chat's name is what a user remembers), then turns, each group best first."""
    if not (titles := match_expression(query)):
        return []
    columns = ("user_text", "answer_text", "thinking_text") if thinking else ("user_text", "answer_text")
    hits = [SearchHit(row[0], row[1], None, row[2], row[3]) for row in db.execute(
        f"SELECT c.id, c.title, snippet(title_search, 0, '{MARK_START}', '{MARK_END}', '…', {SNIPPET_TOKENS}), "
        "bm25(title_search) AS rank FROM title_search JOIN conversations c ON c.rowid = title_search.rowid "
        "WHERE title_search MATCH ? ORDER BY rank LIMIT ?", (titles, limit))]
    hits += [SearchHit(row[0], row[1], row[2], row[3], row[4]) for row in db.execute(
        f"SELECT m.conversation_id, c.title, m.id, snippet(message_search, -1, '{MARK_START}', '{MARK_END}', '…', "
        f"{SNIPPET_TOKENS}), bm25(message_search) AS rank FROM message_search "
        "JOIN messages m ON m.id = message_search.rowid JOIN conversations c ON c.id = m.conversation_id "
        "WHERE message_search MATCH ? ORDER BY rank LIMIT ?", (match_expression(query, columns), limit))]
    return hits[:limit]
