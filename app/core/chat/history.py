"""HistoryStore: conversations in SQLite (WAL), written while replies stream, so a crash loses ~1 s.

A reply's row is created when it starts, with ``finish_reason`` NULL. Partial text is
written as it streams; the final figures when it ends. A row still NULL when the store
next opens belonged to a process that died: it is marked ``interrupted``.

Only a file SQLite calls corrupt (SQLITE_CORRUPT, SQLITE_NOTADB, a failed quick_check) is moved
aside. A locked file (another program holds it) or one from a newer Nalar is left as it is, and
``DataUnavailable`` says why.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from app.core.chat.chat_settings import ChatSettings
from app.core.chat.conversation import Conversation, ThinkingEdit, ToolRound, Turn, TurnKnowledge
from app.core.chat.history_schema import SCHEMA_VERSION, create_or_migrate
from app.core.chat.history_search import SearchHit, search
from app.core.chat.images import ImagePart
from app.core.priority import lower_this_thread
from app.core.settings import paths
from app.core.settings.paths import DataUnavailable

log = logging.getLogger(__name__)

HISTORY_FILE = "history.sqlite3"

BUSY_TIMEOUT_S = 10.0  # how long a locked file is waited for (SQLite retries) before it is reported
CORRUPT_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
FULL_CHECK_MAX_BYTES = 32 * 2**20  # a bigger file gets a cheaper check at open (_quick_check)


class _FailedCheck(sqlite3.DatabaseError):
    """PRAGMA quick_check found damage."""


def is_corrupt(exc: sqlite3.DatabaseError) -> bool:
    """SQLite's own word that the file is damaged, not merely busy, locked or unwritable."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, _FailedCheck) or (code is not None and (code & 0xFF) in CORRUPT_CODES)


def history_path() -> Path:
    return paths.data_dir() / HISTORY_FILE


class _PartialWriter:
    """Partial saves, on a connection and a thread of their own. Each makes FTS5 index the whole growing reply
    again (25 ms for a 400 KB answer): on the GUI thread that stalled a fast stream once a second."""

    def __init__(self, path: Path, busy_timeout_s: float) -> None:
        self._path, self._busy_timeout_s = path, busy_timeout_s
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="nalar-history", initializer=lower_this_thread)
        self._db: sqlite3.Connection | None = None  # opened and used on the pool's one thread only
        self._last: Future[None] | None = None

    def save(self, message_id: int, thinking: str, answer: str) -> None:
        self._last = self._pool.submit(self._write, message_id, thinking, answer)

    def flush(self) -> None:
        """Wait for the saves queued, so what comes next (a read, the reply's end) comes after them."""
        if self._last is not None:
            self._last.result()

    def close(self) -> None:
        self._pool.submit(self._close)
        self._pool.shutdown(wait=True)

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()

    def _write(self, message_id: int, thinking: str, answer: str) -> None:
        try:
            if self._db is None:
                self._db = sqlite3.connect(self._path, isolation_level=None, timeout=self._busy_timeout_s)
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("UPDATE messages SET thinking_text = ?, answer_text = ?, updated_at = ? WHERE id = ?",
                             (thinking, answer, time.time(), message_id))
        except sqlite3.Error as exc:  # the next save, or the reply's end, writes the text again
            log.warning("a partial save of message %s failed: %s", message_id, exc)


class HistoryStore:
    """One SQLite file. Used from the GUI thread; each call is one short transaction. Partial saves are written
    on a thread of their own (``_PartialWriter``); every other call waits for those queued before it."""

    def __init__(self, path: Path | None = None, *, busy_timeout_s: float = BUSY_TIMEOUT_S,
                 owner: bool = True) -> None:
        """``owner``: the window's store, which marks replies a dead Nalar left streaming as interrupted. A
        terminal command is no owner: a reply still streaming may belong to the window running now."""
        self.path = path or history_path()
        self.owner = owner
        paths.private_dir(self.path.parent)
        self.busy_timeout_s = busy_timeout_s
        self.notice: str | None = None
        self._partials: _PartialWriter | None = None  # started by the first partial save
        try:
            self._connection = self._open()
        except sqlite3.DatabaseError as exc:
            if not is_corrupt(exc):
                log.warning("history database %s can't be opened (%s); left as it is", self.path, exc)
                raise DataUnavailable(f"Your conversation history ({self.path}) can't be opened: {exc}.",
                                      "Another program (perhaps another Nalar) may be using it: close it and "
                                      "start Nalar again. Nothing was changed.") from exc
            backup = _move_aside(self.path)
            log.warning("history database %s was unreadable (%s); moved to %s", self.path, exc, backup)
            self.notice = (f"Your conversation history could not be read ({exc}). It was moved to {backup} "
                           "and a fresh history was started.")
            self._connection = self._open()

    @property
    def _db(self) -> sqlite3.Connection:
        """The GUI thread's connection, once the partial saves queued are written: a read then sees them, and
        they can't land after a later write (the reply's end) and undo it."""
        self.flush()
        return self._connection

    def flush(self) -> None:
        """Wait until the partial saves queued are in the file."""
        if self._partials is not None:
            self._partials.flush()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, timeout=self.busy_timeout_s)  # autocommit
        try:
            paths.make_private(self.path)  # SQLite gives its -wal and -shm files the same mode
            db.row_factory = sqlite3.Row
            # Before anything writes: even journal_mode=WAL rewrites the header of a file that isn't WAL yet.
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise DataUnavailable(
                    f"Your conversation history ({self.path}) was written by a newer Nalar (schema {version}; "
                    f"this one reads up to {SCHEMA_VERSION}).", "Run the newer Nalar, or update this one. "
                    "The history was left untouched.")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            check = db.execute(_quick_check(db, self.path)).fetchone()[0]
            if check != "ok":
                raise _FailedCheck(f"integrity check failed: {check}")
            create_or_migrate(db)
            self.interrupted = _mark_interrupted(db) if self.owner else 0  # a locked file is refused here
        except BaseException:
            db.close()
            raise
        return db

    def close(self) -> None:
        if self._partials is not None:
            self._partials.close()
            self._partials = None  # a second close has nothing to wait for
        self._connection.close()

    # ---- conversations -------------------------------------------------------------------------

    def save_conversation(self, conversation: Conversation) -> None:
        with self._db:
            _upsert(self._db, conversation, time.time())

    def delete_conversation(self, conversation_id: str) -> None:
        with self._db:
            self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def conversations(self, ids: list[str] | None = None, *, turns: bool = True) -> list[Conversation]:
        """All conversations (or those of ``ids``), oldest first, each with its whole tree, showing the leaf it
        showed last. ``turns=False``: without their turns (the window's list; a chat's turns load when shown)."""
        found: dict[str, Conversation] = {}
        leaves: dict[str, int | None] = {}
        only = f"WHERE id IN ({', '.join('?' * len(ids))})" if ids is not None else ""
        for row in self._db.execute(f"SELECT id, title, thinking, tools, chat_settings, leaf_id FROM conversations "
                                    f"{only} ORDER BY created_at, rowid", ids or ()):
            found[row["id"]] = Conversation(title=row["title"], id=row["id"], thinking=bool(row["thinking"]),
                                            tools=bool(row["tools"]),
                                            settings=ChatSettings.from_json(row["chat_settings"]))
            leaves[row["id"]] = row["leaf_id"]
        read: dict[int | None, Turn] = {}
        only = f"WHERE conversation_id IN ({', '.join('?' * len(ids))})" if ids is not None else ""
        for message in self._db.execute(f"SELECT * FROM messages {only} ORDER BY conversation_id, id",
                                        ids or ()) if turns else ():
            turn = _turn_from(message, read.get(message["parent_id"]))
            read[turn.message_id] = turn
            found[message["conversation_id"]].tree.append(turn)
        _load_images(self._db, read)
        for conversation in found.values():
            if shown := read.get(leaves[conversation.id]) or (conversation.tree[-1] if conversation.tree else None):
                conversation.show(shown)
        return list(found.values())

    def search(self, query: str, *, thinking: bool = False, limit: int = 50) -> list[SearchHit]:
        """Titles, questions and answers (and thinking, if asked) matching every word of ``query``."""
        return search(self._db, query, thinking=thinking, limit=limit)

    def set_leaf(self, conversation: Conversation) -> None:
        """The branch shown changed: the conversation opens on it next time."""
        leaf = conversation.leaf
        with self._db:
            self._db.execute("UPDATE conversations SET leaf_id = ? WHERE id = ?",
                             (leaf.message_id if leaf else None, conversation.id))

    def delete_turns(self, root: Turn, conversation: Conversation) -> None:
        """A branch deleted: its first turn's row, and (by cascade) every row below it."""
        if root.message_id is not None:
            with self._db:
                self._db.execute("DELETE FROM messages WHERE id = ?", (root.message_id,))
        self.set_leaf(conversation)

    def add_conversations(self, conversations: list[Conversation]) -> None:
        """Whole conversations (a fork, an import): every turn of each tree with every field, in one
        transaction, so a failure stores none of them."""
        _add_whole(self._db, conversations)

    # ---- replies -------------------------------------------------------------------------------

    def start_turn(self, conversation: Conversation, turn: Turn) -> int:
        """The row of the turn a reply starts for (the shown leaf): a new row under its parent's, or the
        same row reset when the reply goes on (Continue anyway). The conversation then shows it."""
        now = time.time()
        self.save_conversation(conversation)
        with self._db:
            if turn.message_id is None:
                parent = turn.parent.message_id if turn.parent else None
                turn.message_id = self._db.execute(
                    "INSERT INTO messages (conversation_id, parent_id, position, user_text, model, kv_cache_dtype, "
                    "backend, thinking_edits, knowledge, created_at, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (conversation.id, parent, _depth(turn), turn.user, turn.model, turn.kv_cache_dtype,
                     turn.backend, _edits_json(turn), _knowledge_json(turn), now, now)).lastrowid
                _save_images(self._db, turn)
            else:
                self._db.execute(
                    "UPDATE messages SET user_text = ?, thinking_text = '', answer_text = '', model = ?, "
                    "kv_cache_dtype = ?, backend = ?, thinking_tokens = 0, answer_tokens = 0, ttft_s = NULL, "
                    "tok_s = 0, finish_reason = NULL, loop_guard = '', tool_rounds = '[]', thinking_edits = ?, "
                    "updated_at = ? WHERE id = ?", (turn.user, turn.model, turn.kv_cache_dtype, turn.backend,
                                                    _edits_json(turn), now, turn.message_id))
            self._db.execute("UPDATE conversations SET leaf_id = ? WHERE id = ?", (turn.message_id, conversation.id))
        return int(turn.message_id)  # type: ignore[arg-type]

    def save_partial(self, turn: Turn, thinking: str, answer: str) -> None:
        """Queued, not written before it returns (``flush`` waits for it): a crash loses only what is still queued."""
        if turn.message_id is not None:
            self._partials = self._partials or _PartialWriter(self.path, self.busy_timeout_s)
            self._partials.save(turn.message_id, thinking, answer)

    def save_tool_rounds(self, turn: Turn) -> None:
        """A call was made, approved, denied or answered: kept at once, so a crash mid-call loses none of it."""
        if turn.message_id is None:
            return
        with self._db:
            self._db.execute("UPDATE messages SET tool_rounds = ?, updated_at = ? WHERE id = ?",
                             (_rounds_json(turn), time.time(), turn.message_id))

    def finish_turn(self, turn: Turn) -> None:
        if turn.message_id is None:
            return
        with self._db:
            self._db.execute(
                "UPDATE messages SET thinking_text = ?, answer_text = ?, thinking_tokens = ?, answer_tokens = ?, "
                "ttft_s = ?, tok_s = ?, finish_reason = ?, backend = ?, loop_guard = ?, tool_rounds = ?, "
                "thinking_edits = ?, updated_at = ? WHERE id = ?",
                (turn.thinking, turn.answer, turn.thinking_tokens, turn.answer_tokens, turn.ttft_s, turn.answer_tok_s,
                 turn.finish_reason or "stop", turn.backend, turn.loop_guard, _rounds_json(turn), _edits_json(turn),
                 time.time(), turn.message_id))

    def set_keep_thinking(self, turn: Turn) -> None:
        """A turn's "keep its thinking" switch, as it is now."""
        if turn.message_id is not None:
            with self._db:
                self._db.execute("UPDATE messages SET keep_thinking = ? WHERE id = ?",
                                 (int(turn.keep_thinking), turn.message_id))

    def message_row(self, message_id: int) -> dict[str, Any]:
        row = self._db.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        return dict(row) if row else {}


def _move_aside(path: Path) -> Path:
    """A corrupt file, with its -wal and -shm, renamed beside it, for the user to keep or recover."""
    backup = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
    for suffix in ("", "-wal", "-shm"):
        part = Path(str(path) + suffix)
        if part.exists():
            part.replace(Path(str(backup) + suffix))
    return backup


def _upsert(db: sqlite3.Connection, conversation: Conversation, now: float) -> None:
    """A conversation's own row (not its turns): added, or its title, switches and settings updated."""
    db.execute(
        "INSERT INTO conversations (id, title, thinking, tools, chat_settings, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET title = excluded.title, "
        "thinking = excluded.thinking, tools = excluded.tools, chat_settings = excluded.chat_settings, "
        "updated_at = excluded.updated_at",
        (conversation.id, conversation.title, int(conversation.thinking), int(conversation.tools),
         conversation.settings.to_json() if conversation.settings else "", now, now))


def add_conversations_at(path: Path, conversations: list[Conversation],
                         busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
    """``HistoryStore.add_conversations`` on a connection of the calling thread's own, for an import on a worker
    thread (the store's connection belongs to the GUI thread). One transaction: a failure stores nothing."""
    db = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_s)
    try:
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA synchronous=NORMAL")
        _add_whole(db, conversations)
    finally:
        db.close()


def _add_whole(db: sqlite3.Connection, conversations: list[Conversation]) -> None:
    """Every turn of each tree, parents before children (each tree lists a turn after its parent), with the
    depths found in one pass: a walk to the root per turn took 16.7 s for a 16,000-turn chat."""
    now = time.time()
    with db:
        db.execute("BEGIN")
        for conversation in conversations:
            _upsert(db, conversation, now)
            depths: dict[int, int] = {}
            for turn in conversation.tree:
                depths[id(turn)] = depth = _depth(turn, depths)
                _insert_whole(db, conversation, turn, depth, now)
            leaf = conversation.leaf
            db.execute("UPDATE conversations SET leaf_id = ? WHERE id = ?",
                       (leaf.message_id if leaf else None, conversation.id))


def _insert_whole(db: sqlite3.Connection, conversation: Conversation, turn: Turn, depth: int, now: float) -> None:
    """A finished turn's row with every field, and its images (a fork, an import)."""
    turn.message_id = db.execute(
        "INSERT INTO messages (conversation_id, parent_id, position, user_text, thinking_text, answer_text, model, "
        "kv_cache_dtype, thinking_tokens, answer_tokens, ttft_s, tok_s, finish_reason, backend, loop_guard, "
        "tool_rounds, keep_thinking, thinking_edits, knowledge, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (conversation.id, turn.parent.message_id if turn.parent else None, depth, turn.user, turn.thinking,
         turn.answer, turn.model, turn.kv_cache_dtype, turn.thinking_tokens, turn.answer_tokens, turn.ttft_s,
         turn.answer_tok_s, turn.finish_reason or "stop", turn.backend, turn.loop_guard, _rounds_json(turn),
         int(turn.keep_thinking), _edits_json(turn), _knowledge_json(turn), now, now)).lastrowid
    _save_images(db, turn)


def _quick_check(db: sqlite3.Connection, path: Path) -> str:
    """The whole file's check, or, past FULL_CHECK_MAX_BYTES, the list's table's: quick_check reads every page
    (0.5 s warm, 5 s cold for a 226 MiB history of 200,000 turns, before the window could show). A damaged page
    elsewhere is still SQLITE_CORRUPT when read."""
    listed = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'conversations'").fetchone()
    big = path.stat().st_size > FULL_CHECK_MAX_BYTES
    return "PRAGMA quick_check(conversations)" if big and listed else "PRAGMA quick_check"


def _mark_interrupted(db: sqlite3.Connection) -> int:
    """Rows still streaming belong to a process that died: what arrived is kept, marked interrupted."""
    cursor = db.execute("UPDATE messages SET finish_reason = 'interrupted', updated_at = ? WHERE finish_reason IS NULL",
                        (time.time(),))
    return cursor.rowcount


def _turn_from(message: sqlite3.Row, parent: Turn | None) -> Turn:
    return Turn(user=message["user_text"], thinking=message["thinking_text"], answer=message["answer_text"],
                finish_reason=message["finish_reason"], thinking_tokens=message["thinking_tokens"],
                answer_tokens=message["answer_tokens"], ttft_s=message["ttft_s"], answer_tok_s=message["tok_s"],
                message_id=message["id"], model=message["model"], kv_cache_dtype=message["kv_cache_dtype"],
                backend=message["backend"], loop_guard=message["loop_guard"],
                tool_rounds=_rounds_from(message["tool_rounds"]), keep_thinking=bool(message["keep_thinking"]),
                thinking_edits=_edits_from(message["thinking_edits"]),
                knowledge=_knowledge_from(message["knowledge"]), parent=parent)


def _save_images(db: sqlite3.Connection, turn: Turn) -> None:
    db.executemany("INSERT INTO message_images (message_id, position, name, mime, width, height, data) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)", [(turn.message_id, n, i.name, i.mime, i.width, i.height, i.data)
                                                    for n, i in enumerate(turn.images)])


def _load_images(db: sqlite3.Connection, turns: dict[int | None, Turn]) -> None:
    """Each loaded turn's images, in the order sent. Only those turns' rows are read: the table holds every
    image's bytes, and the start-up (no turns read) or one chat's opening must not read them all."""
    found: dict[int, list[ImagePart]] = {}
    ids = [message_id for message_id in turns if message_id is not None]
    for start in range(0, len(ids), 500):  # under SQLite's limit on bound values
        chunk = ids[start:start + 500]
        for row in db.execute(f"SELECT * FROM message_images WHERE message_id IN ({', '.join('?' * len(chunk))}) "
                              "ORDER BY message_id, position", chunk):
            found.setdefault(row["message_id"], []).append(
                ImagePart(bytes(row["data"]), row["mime"], row["name"], row["width"], row["height"]))
    for message_id, images in found.items():
        turns[message_id].images = tuple(images)


def _depth(turn: Turn, known: dict[int, int] | None = None) -> int:
    """How many turns lie above ``turn``; a walk up to the nearest turn whose depth is ``known`` (by id)."""
    depth, node = 0, turn.parent
    while node is not None:
        if known is not None and (above := known.get(id(node))) is not None:
            return depth + above + 1
        depth, node = depth + 1, node.parent
    return depth


def _rounds_json(turn: Turn) -> str:
    return json.dumps([tool_round.to_json() for tool_round in turn.tool_rounds], ensure_ascii=False)


def _rounds_from(text: str) -> list[ToolRound]:
    try:
        return [ToolRound.from_json(item) for item in json.loads(text or "[]")]
    except (ValueError, TypeError, KeyError):  # a damaged cell loses its calls, not the conversation
        log.warning("unreadable tool calls in the history; shown without them")
        return []


def _edits_json(turn: Turn) -> str:
    return json.dumps([edit.to_json() for edit in turn.thinking_edits], ensure_ascii=False)


def _edits_from(text: str) -> list[ThinkingEdit]:
    try:
        return [ThinkingEdit.from_json(item) for item in json.loads(text or "[]")]
    except (ValueError, TypeError, AttributeError):  # a damaged cell loses the edit marks, not the conversation
        log.warning("unreadable thinking edits in the history; shown without them")
        return []


def _knowledge_json(turn: Turn) -> str:
    return turn.knowledge.to_json() if turn.knowledge is not None else ""


def _knowledge_from(text: str) -> TurnKnowledge | None:
    try:
        return TurnKnowledge.from_json(text)
    except (ValueError, TypeError, KeyError, AttributeError):  # a damaged cell loses the sources, not the turn
        log.warning("unreadable knowledge sources in the history; the turn is shown without them")
        return None
