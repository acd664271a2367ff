"""The history database's schema, and the steps that bring an older file up to it.

Schema 7 stores each conversation as a tree of turns: a turn (a question and its reply) has a parent
turn, siblings are other tries of the same point (an edited question, a regenerated reply), and the
conversation remembers the leaf it shows. ``position`` is a turn's depth on its branch. Schema 8 adds
the full-text index (history_search), schema 9 the columns of per-chat settings and thinking edits,
schema 10 an index of the replies still streaming, schema 11 a question's images, schema 12 the knowledge passages
a question was asked with.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from app.core.chat.history_search import add_search_index

SCHEMA_VERSION = 12

CONVERSATIONS = """
CREATE TABLE conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    thinking INTEGER NOT NULL DEFAULT 1,
    tools INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    leaf_id INTEGER REFERENCES messages(id) ON DELETE SET NULL,
    chat_settings TEXT NOT NULL DEFAULT ''
)"""
MESSAGES = """
CREATE TABLE {name} (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    user_text TEXT NOT NULL,
    thinking_text TEXT NOT NULL DEFAULT '',
    answer_text TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    kv_cache_dtype TEXT NOT NULL DEFAULT '',
    thinking_tokens INTEGER NOT NULL DEFAULT 0,
    answer_tokens INTEGER NOT NULL DEFAULT 0,
    ttft_s REAL,
    tok_s REAL NOT NULL DEFAULT 0,
    finish_reason TEXT,
    backend TEXT NOT NULL DEFAULT '',
    loop_guard TEXT NOT NULL DEFAULT '',
    tool_rounds TEXT NOT NULL DEFAULT '[]',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    thinking_edits TEXT NOT NULL DEFAULT '[]',
    keep_thinking INTEGER NOT NULL DEFAULT 0,
    knowledge TEXT NOT NULL DEFAULT ''
)"""
# Schema 11: a question's images (Turn.images), in the order sent, as the bytes the model read.
IMAGES = """
CREATE TABLE IF NOT EXISTS message_images (
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    name TEXT NOT NULL DEFAULT '',
    mime TEXT NOT NULL,
    width INTEGER NOT NULL DEFAULT 0,
    height INTEGER NOT NULL DEFAULT 0,
    data BLOB NOT NULL,
    PRIMARY KEY (message_id, position)
)"""
INDEXES = ("CREATE INDEX messages_by_conversation ON messages (conversation_id, id)",
           "CREATE INDEX messages_by_parent ON messages (parent_id)")
# Schema 10: the replies still streaming, found at start-up without reading every row (0.15-0.25 s at 200,000
# turns). Partial: only rows whose finish_reason is NULL are in it, a handful at most.
STREAMING_INDEX = "CREATE INDEX IF NOT EXISTS messages_streaming ON messages (id) WHERE finish_reason IS NULL"
# Every column schema 6 had, copied as it is by the step to 7.
V6_COLUMNS = ("id, conversation_id, position, user_text, thinking_text, answer_text, model, kv_cache_dtype, "
              "thinking_tokens, answer_tokens, ttft_s, tok_s, finish_reason, backend, loop_guard, tool_rounds, "
              "created_at, updated_at")


def _to_tree(db: sqlite3.Connection) -> None:
    """6 -> 7: a linear chat becomes a single branch. Each turn's parent is the turn before it; the chat
    shows its last turn. SQLite can't drop the old UNIQUE (conversation_id, position) in place (siblings
    share a depth), so the table is rebuilt with the same ids."""
    db.execute(MESSAGES.format(name="messages_v7"))
    db.execute(f"INSERT INTO messages_v7 (parent_id, {V6_COLUMNS}) SELECT (SELECT p.id FROM messages p "
               "WHERE p.conversation_id = m.conversation_id AND p.position < m.position ORDER BY p.position DESC "
               f"LIMIT 1), {V6_COLUMNS} FROM messages m ORDER BY m.id")
    db.execute("DROP TABLE messages")
    db.execute("ALTER TABLE messages_v7 RENAME TO messages")
    db.execute("ALTER TABLE conversations ADD COLUMN leaf_id INTEGER REFERENCES messages(id) ON DELETE SET NULL")
    db.execute("UPDATE conversations SET leaf_id = (SELECT id FROM messages WHERE conversation_id = conversations.id "
               "ORDER BY position DESC, id DESC LIMIT 1)")
    for index in INDEXES:
        db.execute(index)


# Schema 9's columns, each (table, column, declaration):
# - conversations.chat_settings: JSON of the chat's own preset values (system prompt, sampling); '' follows Settings;
# - messages.thinking_edits: JSON of the user's edits to the thinking (pause, edit, resume), '[]' when none;
# - messages.keep_thinking: 1 when the model reads this turn's thinking in later turns.
V9_COLUMNS = (("conversations", "chat_settings", "TEXT NOT NULL DEFAULT ''"),
              ("messages", "thinking_edits", "TEXT NOT NULL DEFAULT '[]'"),
              ("messages", "keep_thinking", "INTEGER NOT NULL DEFAULT 0"))


def _add_v9_columns(db: sqlite3.Connection) -> None:
    """8 -> 9. A file that came through the step to 7 already has the messages columns (it rebuilt the table
    with today's declaration), so only the missing ones are added."""
    for table, column, declaration in V9_COLUMNS:
        if column not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")


def _add_knowledge_column(db: sqlite3.Connection) -> None:
    """11 -> 12: messages.knowledge, JSON of the passages a question was asked with (TurnKnowledge), '' when none.
    A file that came through the step to 7 already has it (that step builds today's table)."""
    if "knowledge" not in {row[1] for row in db.execute("PRAGMA table_info(messages)")}:
        db.execute("ALTER TABLE messages ADD COLUMN knowledge TEXT NOT NULL DEFAULT ''")


def _sql(statement: str) -> Callable[[sqlite3.Connection], object]:
    return lambda db: db.execute(statement)


# Each step brings a database of version N (the key) to N + 1.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], object]] = {
    1: _sql("ALTER TABLE messages ADD COLUMN backend TEXT NOT NULL DEFAULT ''"),
    2: _sql("ALTER TABLE conversations ADD COLUMN thinking INTEGER NOT NULL DEFAULT 1"),
    3: _sql("ALTER TABLE messages ADD COLUMN loop_guard TEXT NOT NULL DEFAULT ''"),
    4: _sql("ALTER TABLE messages ADD COLUMN tool_rounds TEXT NOT NULL DEFAULT '[]'"),  # JSON: ToolRound.to_json
    5: _sql("ALTER TABLE conversations ADD COLUMN tools INTEGER NOT NULL DEFAULT 0"),
    6: _to_tree,
    7: add_search_index,  # schema 8: full-text search, built from what is stored
    8: _add_v9_columns,
    9: _sql(STREAMING_INDEX),
    10: _sql(IMAGES),  # schema 11: the images table, empty
    11: _add_knowledge_column,
}


def create_or_migrate(db: sqlite3.Connection) -> None:
    """A new file gets the current schema; an older one is brought up step by step, in one transaction
    (a failed step leaves the file as it was). Foreign keys are off meanwhile, as SQLite's guide to
    rebuilding a table asks, and checked before the commit."""
    fresh = db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'messages'").fetchone()[0] == 0
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if not fresh and version == SCHEMA_VERSION:
        return
    db.execute("PRAGMA foreign_keys=OFF")
    db.execute("BEGIN IMMEDIATE")
    try:
        if fresh:
            for statement in (CONVERSATIONS, MESSAGES.format(name="messages"), IMAGES, *INDEXES, STREAMING_INDEX):
                db.execute(statement)
            add_search_index(db)
        else:
            version = max(1, version)
            while version < SCHEMA_VERSION:
                MIGRATIONS[version](db)
                version += 1
        if problems := db.execute("PRAGMA foreign_key_check").fetchall():
            raise sqlite3.IntegrityError(f"the migrated history has {len(problems)} broken references")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    finally:
        db.execute("PRAGMA foreign_keys=ON")
