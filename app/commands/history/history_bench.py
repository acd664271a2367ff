"""`nalar bench history`: the history at scale, in a temporary database (the user's is never touched).

Generates ``conversations`` chats of ``turns_each`` turns (10,000 x 20 = 200,000 turns by default; one
of them 500 turns long), then times, with Nalar's own code paths: `nalar` itself started on that history
until its window is shown (and on an empty one, for the part that is not the history's), opening the store
and listing every conversation, full-text search (p50/p95 over varied queries, and words being typed),
loading a 500-turn chat's rows and building what the model reads, a send after 500 turns (Nalar's own
work: the new turn, its row, the leaf, the messages), and the bytes the search index adds per streamed token.
"""

from __future__ import annotations

import os
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.commands.bench import startup_seconds
from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore, history_path
from app.core.settings.settings import Settings, save_settings

WORDS = ("kettle water boil minutes energy prime number proof integral series converge matrix vector rust python "
         "thread lock queue memory cache token model reason answer question river mountain cloud light blue "
         "rayleigh scatter photon garden soil tomato recipe flour yeast bread oven").split()
ANSWER_WORDS = 40
XDG_VARS = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME")
SENDS = 5  # the send's figure is their median: one send on a shared 2-core machine varied 2-19 ms
PARTIAL_SAVE_TOKENS = 20  # a partial save a second at about 20 tok/s (the 2-core CPU's order of magnitude)


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _chat(rng: random.Random, n: int, turns: int) -> Conversation:
    conversation = Conversation(title=f"chat {n}: {_text(rng, 4)}")
    for _ in range(turns):
        conversation.add_turn(Turn(user=_text(rng, 12), thinking=_text(rng, ANSWER_WORDS),
                                   answer=_text(rng, ANSWER_WORDS), finish_reason="stop", model="bench"))
    return conversation


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _written() -> int:
    """Bytes this process has handed to write() so far (Linux /proc/self/io wchar)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


@contextmanager
def _home(root: Path) -> Iterator[dict[str, str]]:
    """This process's XDG dirs under ``root`` meanwhile (so history_path() and settings_path() name its files),
    and the environment a `nalar` started there gets."""
    before = {var: os.environ.get(var) for var in XDG_VARS}
    env = dict(os.environ) | {var: str(root / var.lower()) for var in XDG_VARS}
    os.environ.update(env)
    try:
        yield env
    finally:
        for var, value in before.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def bench_history(conversations: int = 10_000, turns_each: int = 20, searches: int = 200,
                  startups: int = 3) -> dict[str, Any]:
    rng = random.Random(34)
    result: dict[str, Any] = {"benchmark": "history", "conversations": conversations}
    with tempfile.TemporaryDirectory(prefix="nalar-bench-history-") as folder:
        with _home(Path(folder) / "empty") as env:  # its own home: the window adds a new chat to an empty history
            save_settings(Settings())  # settings exist: not a first run (no welcome dialog)
            empty = startup_seconds(startups, env)
        result |= _with_history(Path(folder) / "history", rng, conversations, turns_each, searches, startups)
        result["window shown with an empty history, from process start: ms"] = _ms(empty[0])
    return result


def _with_history(root: Path, rng: random.Random, conversations: int, turns_each: int, searches: int,
                  startups: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    with _home(root) as env:
        save_settings(Settings())
        path = history_path()
        store = HistoryStore(path)
        started = time.perf_counter()
        long_chat = _chat(rng, 0, 500)
        batch = [long_chat]
        total = 500
        for n in range(1, conversations):
            batch.append(_chat(rng, n, turns_each))
            total += turns_each
            if len(batch) >= 500:
                store.add_conversations(batch)
                batch = []
        store.add_conversations(batch)
        store.close()
        result |= {"turns": total, "generate: s": round(time.perf_counter() - started, 1),
                   "database: MiB": round(sum(p.stat().st_size for p in path.parent.glob(f"{path.name}*")) / 2**20, 1)}

        shown, from_first_line = startup_seconds(startups, env)
        result |= {"window shown, from process start: ms": _ms(shown),
                   "window shown, from the app's first line: ms": _ms(from_first_line)}
        started = time.perf_counter()
        store = HistoryStore(path)
        listed = store.conversations(turns=False)
        result["open the store and list every conversation (start-up's data part): ms"] = _ms(
            time.perf_counter() - started)
        started = time.perf_counter()
        assert len(store.conversations()) == len(listed) == conversations
        result["read every conversation whole (start-up's data part before 2026-12-03): ms"] = _ms(
            time.perf_counter() - started)

        times = []
        for _ in range(searches):
            query = " ".join(rng.sample(WORDS, rng.choice((1, 2, 3))))
            started = time.perf_counter()
            store.search(query, thinking=rng.random() < 0.5)
            times.append(time.perf_counter() - started)
        times.sort()
        result["search p50: ms"] = _ms(statistics.median(times))
        result["search p95: ms"] = _ms(times[int(len(times) * 0.95) - 1])
        result["search max: ms"] = _ms(times[-1])
        typing = []
        for word in WORDS:  # a word being typed: its first letters, expanded as a prefix
            started = time.perf_counter()
            store.search(word[:max(2, len(word) - 2)], thinking=True)
            typing.append(time.perf_counter() - started)
        result["search for a word being typed (prefix), worst: ms"] = _ms(max(typing))

        started = time.perf_counter()
        [opened] = store.conversations([long_chat.id])
        opened.messages()
        result["open a 500-turn chat (rows + what the model reads): ms"] = _ms(time.perf_counter() - started)

        sends = []
        for n in range(SENDS):  # each reply ended before the next send, as in the window
            started = time.perf_counter()
            turn = opened.add_turn(Turn(user=f"one more question {n}"))
            store.start_turn(opened, turn)
            opened.messages()
            sends.append(time.perf_counter() - started)
            turn.finish_reason = "stop"
            store.finish_turn(turn)
        result["a send after 500 turns (Nalar's own work): ms"] = _ms(statistics.median(sends))
        turn = opened.add_turn(Turn(user="the streamed one"))
        store.start_turn(opened, turn)

        result |= _index_bytes_per_token(store, opened, turn, rng)
        store.close()
    return result


def _index_bytes_per_token(store: HistoryStore, conversation: Conversation, turn: Turn,
                           rng: random.Random) -> dict[str, Any]:
    """A 400-token reply saved as it streams (a partial save every PARTIAL_SAVE_TOKENS), with the index and
    then with its triggers off: the difference is what the index costs."""
    tokens = [rng.choice(WORDS) + " " for _ in range(400)]

    def stream() -> int:
        before = _written()
        for end in range(PARTIAL_SAVE_TOKENS, len(tokens) + 1, PARTIAL_SAVE_TOKENS):
            store.save_partial(turn, "", "".join(tokens[:end]))
        store.flush()  # the saves are written on the store's own thread
        return _written() - before

    with_index = stream()
    with sqlite3.connect(store.path) as db:  # this temporary database only
        for trigger in ("insert", "update", "delete"):
            db.execute(f"DROP TRIGGER message_search_{trigger}")
    without = stream()
    return {"bytes written per streamed token, with the index": round(with_index / len(tokens)),
            "of which the index": round((with_index - without) / len(tokens)),
            "partial save every (tokens)": PARTIAL_SAVE_TOKENS}


GOALS_MS = {"window shown, from process start: ms": 1500,
            "search p95: ms": 50, "open a 500-turn chat (rows + what the model reads): ms": 150,
            "a send after 500 turns (Nalar's own work): ms": 5}


def run_history_bench(as_json: bool, conversations: int = 10_000) -> int:
    import json

    result = bench_history(conversations)
    if as_json:
        print(json.dumps(result, indent=2))
        return 0
    for key, value in result.items():
        goal = f"   (goal <= {GOALS_MS[key]} ms)" if key in GOALS_MS else ""
        print(f"{key:58} {value}{goal}")
    return 0
