"""`nalar history search` and `nalar history export`, run as a user would in a terminal (a real child
process on a real history file)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore, history_path
from app.core.chat.history_schema import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]


def nalar(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", "history", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def saved() -> tuple[Conversation, Conversation]:
    store = HistoryStore()
    made = []
    for title, user, answer in (("Kettles ☕", "How long for a kettle?", "About *three* minutes."),
                                ("Other", "Unrelated", "<b>not markup</b> kettle")):
        conversation = Conversation(title=title)
        turn = conversation.add_turn(Turn(user=user))
        store.start_turn(conversation, turn)
        turn.answer, turn.finish_reason = answer, "stop"
        store.finish_turn(turn)
        made.append(conversation)
    streaming = made[1].add_turn(Turn(user="still streaming in a running window"))
    store.start_turn(made[1], streaming)
    store.close()
    return made[0], made[1]


def test_search_prints_ranked_marked_hits_and_json() -> None:
    """Bugs caught: the command missing or not reading the window's file; no marks; JSON not parseable; the
    command marking a reply that a running window still streams as interrupted (it opens as no owner)."""
    first, second = saved()
    shown = nalar("search", "kettle")
    assert shown.returncode == 0, shown.stderr
    assert "Kettles ☕" in shown.stdout and "[kettle]" in shown.stdout and "<b>not markup</b> [kettle]" in shown.stdout
    found = json.loads(nalar("search", "kettle", "--json").stdout)
    assert {hit["conversation_id"] for hit in found} == {first.id, second.id}
    assert all("\x02" not in hit["snippet"] for hit in found)
    assert nalar("search", "nothing-like-this").returncode == 1
    with sqlite3.connect(history_path()) as db:
        assert db.execute("SELECT count(*) FROM messages WHERE finish_reason IS NULL").fetchone()[0] == 1


def test_export_the_newest_one_by_id_or_all_as_markdown_or_json() -> None:
    """Bugs caught: export needing the window; --all dropping a chat; an unknown id printing nothing with
    exit code 0."""
    first, second = saved()
    newest = nalar("export")
    assert newest.returncode == 0 and newest.stdout.startswith("# Other")
    one = json.loads(nalar("export", first.id[:10], "--format", "json").stdout)
    assert one["title"] == "Kettles ☕" and one["messages"][0]["answer"] == "About *three* minutes."
    everything = json.loads(nalar("export", "--all", "--format", "json").stdout)
    assert [c["id"] for c in everything] == [first.id, second.id]
    assert "# Kettles ☕" in nalar("export", "--all").stdout
    unknown = nalar("export", "no-such-id")
    assert unknown.returncode == 1 and "no-such-id" in unknown.stderr


def test_a_newer_history_is_refused_with_the_reason() -> None:
    """Bug caught: a terminal command migrating (or failing with a traceback on) a newer Nalar's file."""
    saved()
    with sqlite3.connect(history_path()) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    refused = nalar("search", "kettle")
    assert refused.returncode == 1 and "newer Nalar" in refused.stderr and "Traceback" not in refused.stderr


def test_import_adds_chats_and_a_bad_file_changes_nothing(tmp_path: Path) -> None:
    """Bugs caught: `nalar history import` missing; a bad file stored in part or answered with a traceback."""
    saved()
    good = tmp_path / "messages.json"
    good.write_text(json.dumps([{"role": "user", "content": "imported question"},
                                {"role": "assistant", "content": "imported answer"}]))
    done = nalar("import", str(good))
    assert done.returncode == 0 and "imported question" in done.stdout
    assert json.loads(nalar("search", "imported", "--json").stdout)[0]["title"] == "imported question"
    bad = tmp_path / "bad.json"
    bad.write_text('[{"role": "user", "content": "x"}, {"role": "robot"}]')
    refused = nalar("import", str(bad))
    assert refused.returncode == 1 and "'robot'" in refused.stderr and "Nothing was imported" in refused.stderr
    assert "Traceback" not in refused.stderr
    with sqlite3.connect(history_path()) as db:
        assert db.execute("SELECT count(*) FROM conversations").fetchone()[0] == 3


def test_import_of_hostile_files_says_each_step_and_ends_with_a_result_or_a_message(tmp_path: Path) -> None:
    """Hostile inputs, through the CLI (it shares the window's reader): a FIFO named like a JSON file, a link to
    /dev/zero, 100,000 ``[``, and a 16,000-turn chat. Bugs it would catch: the CLI blocking for ever on the FIFO or
    reading /dev/zero until the memory ran out (the reader's regular-file and size checks bypassed), a traceback
    instead of a message, or a long import that printed nothing until it ended (it looked hung)."""
    import os

    from app.commands.hostile import inputs

    fifo = tmp_path / "chats.json"
    os.mkfifo(fifo)
    zeros = tmp_path / "zeros.json"
    zeros.symlink_to("/dev/zero")
    for path, problem in ((fifo, "not a regular file"), (zeros, "not a regular file"),
                          (inputs.open_brackets(tmp_path), "is not JSON")):
        refused = nalar("import", str(path))  # its timeout (120 s) fails a hang
        assert refused.returncode == 1 and problem in refused.stderr and "Nothing was imported" in refused.stderr, \
            refused.stderr
        assert "Traceback" not in refused.stderr
    long = nalar("import", str(inputs.linear_chat(tmp_path)))
    assert long.returncode == 0 and "(16000 turns)" in long.stdout, long.stderr
    steps = long.stderr.splitlines()
    assert steps[:2] == ["Importing long-chat.json: reading and checking it…",
                         "Importing long-chat.json: storing 1 conversation(s), 16,000 turns…"], steps
