"""Full-text search over the history: SQLite FTS5 on titles, questions, answers and (a switch) thinking.

The index tables are external-content FTS5 tables kept in step by triggers, so every write (a partial save
while a reply streams included) updates them in the same transaction, whichever code path made it.
Titles are ranked by FTS5's bm25(); turns by BM25 among their newest matches (``_turns`` says why).
Snippets mark the matched words with ``MARK_START`` and ``MARK_END``, control characters no text
contains, so a view escapes the text first and then turns the marks into highlights.

A query is cleaned and capped before SQLite sees it (``query_terms``), and ``HistorySearch`` runs one search on
a read-only connection of its own, so the window can run it on a worker thread and interrupt a stale one.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

MARK_START, MARK_END = "\x02", "\x03"
SNIPPET_TOKENS = 12
CANDIDATES = 300  # turns ranked per search: the newest that match (all of them, for a rarer word)
MARKED_SPAN = re.compile(f"{MARK_START}(.*?){MARK_END}", re.DOTALL)
# Each word costs FTS5 a read of its doclist: 10,000 pasted words took 1.9 s, 100,000 over 100 s.
MAX_QUERY_TERMS = 64
MAX_QUERY_CHARS = 1_000
CAP_NOTE = f"only the first {MAX_QUERY_TERMS} words ({MAX_QUERY_CHARS:,} characters) are searched"
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]+")  # a NUL makes SQLite refuse the query
_SURROGATE = re.compile("[\ud800-\udfff]+")  # unpaired: can't be encoded for SQLite

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


@dataclass(frozen=True)
class QueryTerms:
    """The words a query searches for, and whether some were left out (``CAP_NOTE`` says which)."""

    words: tuple[str, ...]
    cut: bool


def query_terms(query: str) -> QueryTerms:
    """The words of ``query`` as SQLite can take them: control characters (a pasted NUL) act as spaces, unpaired
    surrogates are dropped, and at most MAX_QUERY_TERMS words and MAX_QUERY_CHARS characters are kept."""
    parts = _SURROGATE.sub("", _CONTROL.sub(" ", query)).split(maxsplit=MAX_QUERY_TERMS)
    cut = len(parts) > MAX_QUERY_TERMS
    words: list[str] = []
    left = MAX_QUERY_CHARS
    for word in parts[:MAX_QUERY_TERMS]:
        if left <= 0 or len(word) > left:
            cut = True
            if left > 0:
                words.append(word[:left])
            break
        words.append(word)
        left -= len(word) + 1
    return QueryTerms(tuple(words), cut)


def match_expression(query: str, columns: tuple[str, ...] | None = None, *, prefix: bool = True) -> str:
    """The user's words as an FTS5 query: each a quoted phrase (so ``"``, ``*``, ``-``, ``OR`` and ``:`` are
    just text), all required, the last one also as a prefix (results while the word is being typed). The words
    are ``query_terms``: cleaned and capped."""
    words = ['"' + word.replace('"', '""') + '"' for word in query_terms(query).words]
    if not words:
        return ""
    if prefix:
        words[-1] += "*"
    expression = " ".join(words)
    return f"{{{' '.join(columns)}}} : ({expression})" if columns else expression


def search(db: sqlite3.Connection, query: str, *, thinking: bool = False, limit: int = 50) -> list[SearchHit]:
    """Titles first (a chat's name is what a user remembers), then turns, each group best first."""
    query = " ".join(query_terms(query).words)  # cleaned and capped once, before any SQL
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


class HistorySearch:
    """One search of the history file on a read-only connection of its own, opened and closed by ``run()``, so it
    can run on a worker thread while the window's connection writes. ``interrupt()``, from any thread, stops it
    inside SQLite (a stale search as the user types on): ``run()`` then raises sqlite3.OperationalError."""

    def __init__(self, path: Path, query: str, *, thinking: bool = False, limit: int = 50,
                 busy_timeout_s: float = 10.0) -> None:
        self.path, self.query, self.thinking, self.limit = path, query, thinking, limit
        self.busy_timeout_s = busy_timeout_s
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._interrupted = False

    def run(self) -> list[SearchHit]:
        with self._lock:
            if self._interrupted:
                raise sqlite3.OperationalError("interrupted")
            uri = f"{Path(self.path).resolve().as_uri()}?mode=ro"
            self._db = db = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_s)
        try:
            return search(db, self.query, thinking=self.thinking, limit=self.limit)
        finally:
            with self._lock:
                self._db = None
            db.close()

    def interrupt(self) -> None:
        with self._lock:
            self._interrupted = True
            if self._db is not None:
                self._db.interrupt()
