"""A history database exactly as the last schema-6 Nalar wrote it, with data in every field, for migration tests.

The DDL is app/core/chat/history.py's SCHEMA at commit f3b0e89 (the last schema-6 release), copied as it was.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

SCHEMA_6 = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    thinking INTEGER NOT NULL DEFAULT 1,
    tools INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
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
    UNIQUE (conversation_id, position)
);
"""

TOOL_ROUNDS = [{"thinking": "Je dois additionner: 2 + 40.", "content": "",
                "calls": [{"call_id": "call-1", "name": "add", "arguments": '{"a": 2, "b": 40}', "server": "démo",
                           "result": "42", "status": "ok"},
                          {"call_id": "call-2", "name": "slow", "arguments": "{}", "server": "démo", "result": "",
                           "status": "denied"}]}]
# (conversation id, title, thinking, tools, created_at); messages below: every column of the schema-6 table.
CONVERSATIONS = [("c-one", "Ciel bleu ☁️ — pourquoi?", 1, 1, 100.0), ("c-two", "数学", 0, 0, 200.0),
                 ("c-empty", "New conversation", 1, 0, 300.0)]
MESSAGE_COLUMNS = ("id", "conversation_id", "position", "user_text", "thinking_text", "answer_text", "model",
                   "kv_cache_dtype", "thinking_tokens", "answer_tokens", "ttft_s", "tok_s", "finish_reason", "backend",
                   "loop_guard", "tool_rounds", "created_at", "updated_at")
MESSAGES = [
    (1, "c-one", 0, "Pourquoi le ciel est-il bleu? 🌍", "Rayleigh… diffusion ∝ 1/λ⁴", "À cause de la **diffusion**.",
     "SmolLM2-135M-Instruct", "fp8_e4m3", 12, 7, 0.25, 18.5, "stop", "local", "", "[]", 101.0, 102.0),
    (2, "c-one", 1, "Et 2+40?", "Je calcule.", "42", "SmolLM2-135M-Instruct", "auto", 3, 1, 0.5, 11.0, "stop",
     "local", "", json.dumps(TOOL_ROUNDS, ensure_ascii=False), 103.0, 104.0),
    (3, "c-one", 2, "Répète", "répète répète répète", "encore encore", "remote-model", "", 40, 2, None, 0.0, "loop",
     "office GPU", "thinking: 3 copies of a 5-token span; cut", "[]", 105.0, 106.0),
    (4, "c-two", 0, "1+1 = ?", "数える", "2 (途中", "SmolLM2-135M-Instruct", "auto", 0, 0, None, 0.0, "interrupted",
     "local", "", "[]", 201.0, 202.0),
    (7, "c-two", 1, "Streaming when it died", "half a thought", "", "SmolLM2-135M-Instruct", "auto", 0, 0, None,
     0.0, None, "local", "", "[]", 203.0, 204.0),
]


def write_schema_6(path: Path) -> None:
    """The database a schema-6 Nalar left: three chats (one empty), tool rounds, a loop-guard note, a remote
    backend, an interrupted turn, one still streaming when that Nalar died, non-ASCII text, a gap in the ids."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_6)
    db.executemany("INSERT INTO conversations (id, title, thinking, tools, created_at, updated_at) "
                   "VALUES (?, ?, ?, ?, ?, ?)", [(*c, c[-1] + 50) for c in CONVERSATIONS])
    db.executemany(f"INSERT INTO messages ({', '.join(MESSAGE_COLUMNS)}) VALUES ({', '.join('?' * 18)})", MESSAGES)
    db.execute("PRAGMA user_version = 6")
    db.commit()
    db.close()
