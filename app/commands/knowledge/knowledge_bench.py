"""`nalar bench knowledge [--json]`: a knowledge collection at the size issue 51 names, in a temporary folder
and a temporary index (the user's are never touched).

Generates 1,000 pages of text (100 Markdown files of 10 pages) and 50 PDFs (4 pages each, written with pypdf),
then times, with the code the window and `nalar knowledge` use: the first index (sync_collection on an empty
index), a sync with nothing changed, and 100 searches of 2-5 words (half a file's topic words, half any words),
p50 and p95. With an embedding model found (as `nalar knowledge` finds one), also: its load, embedding the whole
corpus (a sync that reads nothing and embeds every passage) and the same queries ranked hybrid, p50 and p95
(``embedding``; null without a model). Goals (issue 51, this 2-core machine): first index <= 60 s, no-change
sync <= 2 s, query p95 <= 100 ms.
The window's longest stall while indexing is the window's bench to measure: ``window_stall_ms`` is left null
here for it. With --json the report is printed as JSON and, in a source checkout, written to
docs/results/bench-knowledge.json for packaging/figures.py.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from app.commands.jobs import machine_description, publish_bench_report
from app.commands.knowledge.corpus import vocabulary, write_pdfs, write_text_files
from app.core.knowledge.embedder import Embedder, find_embedder
from app.core.knowledge.hybrid import search_ranked
from app.core.knowledge.store import KnowledgeStore
from app.core.knowledge.sync import sync_collection

TEXT_FILES, TEXT_PAGES_EACH, PDFS, PDF_PAGES_EACH, QUERIES = 100, 10, 50, 4, 100
GOALS = {"first_index_s": 60.0, "no_change_sync_s": 2.0, "query_p95_ms": 100.0, "window_stall_ms": 50.0}


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _memory_gib() -> float | None:
    try:
        kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError):
        return None
    return round(kib / 2**20, 1)


def _bench_embedding(db_path: Path, queries: list[str], embedder: Embedder) -> dict[str, Any]:
    started = time.perf_counter()
    embedder.embed(["warm-up"])  # the model's load, timed apart from embedding
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    synced = sync_collection(db_path, "bench", embedder=embedder)
    embed_s = time.perf_counter() - started
    assert synced.embedded is not None and not synced.embedded.problem, synced
    times, hybrid = [], 0
    for query in queries:
        started = time.perf_counter()
        store = KnowledgeStore(db_path)  # a store per question, as the window's look-up and the terminal open one
        ranked = search_ranked(store, ["bench"], query, limit=8, embedder=embedder)
        store.close()
        times.append((time.perf_counter() - started) * 1000)
        hybrid += ranked.ranking == "hybrid"
    return {"model": embedder.name, "origin": embedder.origin, "load_s": round(load_s, 2),
            "passages_embedded": synced.embedded.count, "embed_s": round(embed_s, 2),
            "passages_per_s": round(synced.embedded.count / embed_s, 1) if embed_s else None,
            "hybrid_queries": hybrid, "hybrid_query_p50_ms": round(_percentile(times, 0.5), 2),
            "hybrid_query_p95_ms": round(_percentile(times, 0.95), 2), "hybrid_query_max_ms": round(max(times), 2)}


def bench_knowledge(seed: int = 51) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="nalar-bench-knowledge-"))
    rng = random.Random(seed)
    load = [round(os.getloadavg()[0], 2)]
    try:
        docs = root / "docs"
        docs.mkdir()
        words = vocabulary(rng)
        topics = write_text_files(docs, rng, words, TEXT_FILES, TEXT_PAGES_EACH)
        topics += write_pdfs(docs, rng, words, PDFS, PDF_PAGES_EACH)
        corpus_bytes = sum(path.stat().st_size for path in docs.iterdir())
        db_path = root / "knowledge.sqlite3"
        store = KnowledgeStore(db_path)
        store.add("bench", [docs])
        started = time.perf_counter()
        first = sync_collection(db_path, "bench")
        first_s = time.perf_counter() - started
        syncs = []
        for _ in range(3):
            started = time.perf_counter()
            again = sync_collection(db_path, "bench")
            syncs.append(time.perf_counter() - started)
            assert again.read == 0, f"a sync with nothing changed read {again.read} files"
        queries = [" ".join(rng.sample(topics[rng.randrange(len(topics))], rng.randint(1, 3))
                            + rng.sample(words, rng.randint(1, 2))) for _ in range(QUERIES)]
        times, hits = [], 0
        for query in queries:
            started = time.perf_counter()
            found = store.search("bench", query, limit=8)
            times.append((time.perf_counter() - started) * 1000)
            hits += bool(found)
        embedder = find_embedder("").embedder
        embedding = None if embedder is None else _bench_embedding(db_path, queries, embedder)
        collection = store.collection("bench")
        store.close()
        index_bytes = sum(path.stat().st_size for path in root.glob("knowledge.sqlite3*"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load.append(round(os.getloadavg()[0], 2))
    return {
        "benchmark": "knowledge", "machine": machine_description(), "date": time.strftime("%Y-%m-%d %H:%M"),
        "memory_gib": _memory_gib(), "load_average_1min": load,
        "corpus": {"text_files": TEXT_FILES, "text_pages": TEXT_FILES * TEXT_PAGES_EACH, "pdfs": PDFS,
                   "pdf_pages": PDFS * PDF_PAGES_EACH, "bytes": corpus_bytes},
        "index": {"files": collection.files, "passages": collection.passages, "skipped": len(first.skipped),
                  "failed": len(first.failed), "bytes": index_bytes},
        "first_index_s": round(first_s, 2), "no_change_sync_s": round(statistics.median(syncs), 3),
        "no_change_sync_max_s": round(max(syncs), 3),
        "queries": QUERIES, "queries_with_results": hits,
        "query_p50_ms": round(_percentile(times, 0.5), 2), "query_p95_ms": round(_percentile(times, 0.95), 2),
        "query_max_ms": round(max(times), 2),
        "window_stall_ms": None,  # the window half's bench fills this (the GUI thread's longest stall while indexing)
        "embedding": embedding,
        "goal": GOALS,
    }


def render(report: dict[str, Any]) -> str:
    goal, corpus, index = report["goal"], report["corpus"], report["index"]

    def verdict(value: float | None, limit: float) -> str:
        return "–" if value is None else ("met" if value <= limit else "MISSED")

    stall = report["window_stall_ms"]
    rows = [("first index", f"{report['first_index_s']:.2f} s", f"<= {goal['first_index_s']:g} s",
             verdict(report["first_index_s"], goal["first_index_s"])),
            ("sync, nothing changed (median of 3)", f"{report['no_change_sync_s'] * 1000:.0f} ms",
             f"<= {goal['no_change_sync_s']:g} s", verdict(report["no_change_sync_s"], goal["no_change_sync_s"])),
            ("query p50", f"{report['query_p50_ms']:.1f} ms", "", ""),
            ("query p95", f"{report['query_p95_ms']:.1f} ms", f"<= {goal['query_p95_ms']:g} ms",
             verdict(report["query_p95_ms"], goal["query_p95_ms"])),
            ("window's longest stall while indexing", "–" if stall is None else f"{stall:.1f} ms",
             f"<= {goal['window_stall_ms']:g} ms", verdict(stall, goal["window_stall_ms"]))]
    lines = [f"corpus: {corpus['text_pages']:,} pages of text in {corpus['text_files']} files, {corpus['pdfs']} PDFs "
             f"({corpus['pdf_pages']} pages), {corpus['bytes'] / 2**20:.1f} MiB; index: {index['files']} files, "
             f"{index['passages']:,} passages, {index['bytes'] / 2**20:.1f} MiB",
             f"load average (1 min) before, after: {report['load_average_1min']}", ""]
    if (embedding := report.get("embedding")) is not None:
        rows += [(f"embedding {embedding['passages_embedded']:,} passages", f"{embedding['embed_s']:.1f} s", "", ""),
                 ("hybrid query p50", f"{embedding['hybrid_query_p50_ms']:.1f} ms", "", ""),
                 ("hybrid query p95", f"{embedding['hybrid_query_p95_ms']:.1f} ms", "", "")]
    lines += [f"{name:40} {value:>10}  {limit:>10}  {met}" for name, value, limit, met in rows]
    return "\n".join(lines)


def run_knowledge_bench(*, as_json: bool) -> int:
    return publish_bench_report(bench_knowledge(), "bench-knowledge", render, as_json=as_json)
