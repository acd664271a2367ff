"""`nalar history search QUERY [--json] [--thinking]`, `nalar history export [ID] [--all] [--format md|json]`
and `nalar history import FILE`.

The same HistoryStore and search code as the window, opened as no owner (a reply streaming in a running
window is left as it is). Text goes out as it is stored; nothing in it is run or interpreted.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from app.core.chat.conversation import Conversation
from app.core.chat.history import HistoryStore
from app.core.chat.history_import import ImportProblem, export_json, export_markdown, read_import
from app.core.settings.paths import DataUnavailable


def _open() -> HistoryStore | None:
    try:
        return HistoryStore(owner=False)
    except DataUnavailable as refused:
        print(f"{refused.problem}\n{refused.fix}", file=sys.stderr)
        return None


def run_search(query: str, *, as_json: bool, thinking: bool, limit: int) -> int:
    if (store := _open()) is None:
        return 1
    try:
        hits = store.search(query, thinking=thinking, limit=limit)
    finally:
        store.close()
    if as_json:
        print(json.dumps([asdict(hit) | {"snippet": hit.marked("", "")} for hit in hits], ensure_ascii=False,
                         indent=2))
        return 0
    if not hits:
        print(f"No conversation matches {query!r}.", file=sys.stderr)
        return 1
    for hit in hits:
        where = "title" if hit.message_id is None else f"turn {hit.message_id}"
        print(f"{hit.title}  [{hit.conversation_id[:8]}, {where}]\n    {hit.marked('[', ']')}")
    return 0


def run_export(conversation_id: str | None, *, everything: bool, kind: str) -> int:
    if (store := _open()) is None:
        return 1
    try:  # the list first, then only the chosen chats' turns (not 10,000 chats' to export one)
        chosen = _chosen(store.conversations(turns=False), conversation_id, everything)
        if chosen is not None:
            chosen = store.conversations([c.id for c in chosen]) if not everything else store.conversations()
    finally:
        store.close()
    if chosen is None:
        print(f"No conversation has the id {conversation_id!r}; `nalar history search` shows ids.", file=sys.stderr)
        return 1
    if kind == "json":
        data = [json.loads(export_json(c)) for c in chosen]
        print(json.dumps(data if everything else data[0] if data else [], indent=2, ensure_ascii=False))
    else:
        print("\n\n---\n\n".join(export_markdown(c) for c in chosen))
    return 0


def _chosen(conversations: list[Conversation], conversation_id: str | None,
            everything: bool) -> list[Conversation] | None:
    """Every conversation, the one whose id starts with ``conversation_id``, or the newest one."""
    if everything:
        return conversations
    if conversation_id is None:
        return conversations[-1:]
    found = [c for c in conversations if c.id.startswith(conversation_id)]
    return found[:1] if len(found) == 1 else None


def run_import(file: str) -> int:
    """Read and check the whole file first: a bad one is named and nothing is stored. Each step says what it does on
    stderr, as the window's status bar does: the largest file allowed (64 MiB, about a million turns) takes minutes,
    and a terminal that shows nothing meanwhile looks hung."""
    path = Path(file)
    print(f"Importing {path.name}: reading and checking it…", file=sys.stderr, flush=True)
    try:
        imported = read_import(path)
    except ImportProblem as problem:
        print(f"{problem}\nNothing was imported.", file=sys.stderr)
        return 1
    if (store := _open()) is None:
        return 1
    print(f"Importing {path.name}: storing {len(imported.conversations)} conversation(s), {imported.turns:,} turns…",
          file=sys.stderr, flush=True)
    try:
        store.add_conversations(imported.conversations)
    finally:
        store.close()
    for note in imported.notes:
        print(note, file=sys.stderr)
    for conversation in imported.conversations:
        print(f"imported {conversation.id[:8]}  {conversation.title}  ({len(conversation.tree)} turns)")
    return 0
