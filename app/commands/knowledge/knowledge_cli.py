"""`nalar knowledge add NAME DIR…`, `sync NAME`, `list`, `search NAME "query" [--json] [--ranking …]`, `rm NAME`,
`embedder [PATH|off|auto]`.

The same store and sync as the window, on the data dir's knowledge.sqlite3. Progress goes to stderr, results to
stdout; file text goes out as it is stored, never interpreted. Every error names its cause and the fix.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.core.knowledge.db import KnowledgeUnavailable, knowledge_path
from app.core.knowledge.embedder import OFF, EmbedderChoice, find_embedder, folder_problem
from app.core.knowledge.hybrid import search_ranked
from app.core.knowledge.store import KnowledgeStore
from app.core.knowledge.sync import SyncProgress, SyncResult, sync_collection


class _Failed(Exception):
    pass


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@contextmanager
def _store() -> Iterator[KnowledgeStore]:
    try:
        store = KnowledgeStore(knowledge_path())
    except KnowledgeUnavailable as refused:
        _err(f"nalar knowledge: {refused.problem}\n{refused.fix}")
        raise _Failed from None
    try:
        yield store
    finally:
        store.close()


def _known(store: KnowledgeStore, name: str) -> None:
    try:
        store.collection(name)
    except KeyError as missing:
        _err(f"nalar knowledge: {missing.args[0]}.\nSee them with `nalar knowledge list`; make one with "
             f"`nalar knowledge add {name} FOLDER`.")
        raise _Failed from None


def _progress(progress: SyncProgress) -> None:
    """One line a file on stderr: `[12/340] notes/kettle.md`; one a batch while embedding."""
    if progress.phase == "embedding":
        _err(f"embedding {progress.embedded:,}/{progress.to_embed:,} passages")
    elif progress.current:
        _err(f"[{progress.files_done + 1}/{progress.files_total}] {progress.current}")


def _embedder() -> EmbedderChoice:
    with _store() as store:
        setting = store.embedder_setting()
    return find_embedder(setting)


def _sync(name: str) -> int:
    """The sync, with Ctrl+C as its Cancel: the file being read is left as it was, the rest for the next sync."""
    choice = _embedder()
    if choice.problem:
        _err(f"nalar knowledge: {choice.problem}")
    interrupted = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda number, frame: interrupted.set())
    try:
        result = sync_collection(knowledge_path(), name, on_progress=_progress, cancelled=interrupted.is_set,
                                 embedder=choice.embedder)
    except KnowledgeUnavailable as refused:
        _err(f"nalar knowledge: {refused.problem}\n{refused.fix}")
        return 1
    finally:
        signal.signal(signal.SIGINT, previous)
    _report(name, result)
    if result.cancelled:
        _err(f"Cancelled: what was read is kept; `nalar knowledge sync {name}` reads the rest.")
        return 130
    return 0 if not result.failed else 1


def _report(name: str, result: SyncResult) -> None:
    for entry in result.skipped:
        _err(f"skipped {entry.path}: {entry.reason}")
    for entry in result.failed:
        _err(f"FAILED {entry.path}: {entry.reason}")
    print(f"{name}: {result.read} file(s) read, {result.unchanged} unchanged, {result.removed} removed, "
          f"{len(result.skipped)} skipped, {len(result.failed)} failed")
    if result.embedded is not None and result.embedded.problem:
        _err(f"nalar knowledge: {result.embedded.problem}")
    elif result.embedded is not None:
        print(f"{name}: {result.embedded.count:,} passage(s) embedded")


def run_knowledge(command: str, name: str | None, folders: list[str], query: str | None, *, as_json: bool,
                  limit: int, ranking: str = "auto") -> int:
    try:
        if command == "embedder":
            return _choose_embedder(name)
        return _run(command, name or "", folders, query or "", as_json=as_json, limit=limit, ranking=ranking)
    except _Failed:
        return 1


def _choose_embedder(choice: str | None) -> int:
    """No ``choice``: say what ranking is used. Else store it: a folder (checked first), off, or auto ("")."""
    if choice is not None:
        setting = {"auto": "", OFF: OFF}.get(choice)
        if setting is None:
            folder = Path(choice).expanduser().resolve()
            if problem := folder_problem(folder):
                _err(f"nalar knowledge embedder: {problem}.\nGive a sentence-transformers model folder (config.json, "
                     "modules.json, 1_Pooling/config.json and the weights), or off, or auto.")
                return 2
            setting = str(folder)
        with _store() as store:
            store.set_embedder_setting(setting)
    found = _embedder()
    print(found.describe())
    if found.embedder is not None:
        print(f"    {found.embedder.folder}")
    return 0 if not found.problem else 1


def _run(command: str, name: str, folders: list[str], query: str, *, as_json: bool, limit: int,
         ranking: str) -> int:
    if command == "add":
        with _store() as store:
            try:
                collection = store.add(name, [Path(folder) for folder in folders])
            except ValueError as bad:
                _err(f"nalar knowledge add: {bad}.")
                return 2
        _err(f"{collection.name}: {', '.join(map(str, collection.folders))}; indexing…")
        return _sync(collection.name)
    if command == "sync":
        with _store() as store:
            _known(store, name)
        return _sync(name)
    if command == "list":
        return _list(as_json)
    with _store() as store:
        _known(store, name)
        if command == "rm":
            store.remove(name)
            print(f"removed the collection {name!r} and its index (its folders are untouched)")
            return 0
        return _search(store, name, query, as_json=as_json, limit=limit, ranking=ranking)


def _list(as_json: bool) -> int:
    with _store() as store:
        collections = store.collections()
    if as_json:
        print(json.dumps([{"name": c.name, "folders": [str(f) for f in c.folders], "files": c.files,
                           "passages": c.passages, "skipped": c.skipped,
                           "synced_at": c.synced_at.isoformat() if c.synced_at else None} for c in collections],
                         indent=2))
        return 0
    if not collections:
        _err("No knowledge collections yet: `nalar knowledge add NAME FOLDER…` makes one.")
    for c in collections:
        synced = c.synced_at.astimezone().strftime("%Y-%m-%d %H:%M") if c.synced_at else "never synced"
        print(f"{c.name}: {c.files:,} files, {c.passages:,} passages, {c.skipped:,} skipped; {synced}")
        for folder in c.folders:
            print(f"    {folder}")
    return 0


def _search(store: KnowledgeStore, name: str, query: str, *, as_json: bool, limit: int, ranking: str) -> int:
    choice = find_embedder(store.embedder_setting()) if ranking != "bm25" else EmbedderChoice(None, off=True)
    if ranking == "hybrid" and choice.embedder is None:
        _err(f"nalar knowledge search: --ranking hybrid needs an embedding model. {choice.describe()}")
        return 2
    ranked = search_ranked(store, [name], query, limit=limit, embedder=choice.embedder)
    if ranking == "hybrid" and ranked.ranking != "hybrid":
        _err(f"nalar knowledge search: hybrid ranking can't be used: {ranked.note}.")
        return 2
    found = ranked.passages
    if as_json:
        print(json.dumps({"ranking": ranked.ranking, "embedder": ranked.embedder or None,
                          "note": ranked.note or choice.problem or None,  # why BM25 though a model was asked for
                          "passages": [{"path": str(p.path), "page": p.page, "line_start": p.line_start,
                                        "line_end": p.line_end, "score": float(f"{p.score:.4g}"),
                                        "tokens": p.tokens, "text": p.text} for p in found]},
                         ensure_ascii=False, indent=2))
        return 0
    _err(f"ranking: hybrid, BM25 + {ranked.embedder}" if ranked.ranking == "hybrid" else
         f"ranking: BM25{f' ({ranked.note or choice.problem})' if ranked.note or choice.problem else ''}")
    if not found:
        _err(f"Nothing in {name!r} matches {query!r}. Try other words, or `nalar knowledge sync {name}` if the "
             "files changed.")
        return 1
    for number, passage in enumerate(found, 1):
        print(f"[{number}] {passage.path}, {passage.place}  (score {passage.score:.4g})")
        print("\n".join(f"    {line}" for line in passage.text.splitlines()))
    return 0
