"""Search with BM25 alone, or hybrid: BM25 and the embedding model's vectors, fused by Reciprocal Rank Fusion.

Each ranking's top DEPTH passages are fused: a passage scores the sum over the rankings it is in of
1 / (RRF_K + rank). Passages with no vector yet (a sync still to embed them) still rank by their BM25 term, and a
passage that shares no word with the question is found by its vector alone. Cosine similarity is a dot product:
the stored vectors and the query's are unit length.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from app.core.knowledge.embedder import Embedder, EmbedderBroken
from app.core.knowledge.store import KnowledgeStore, Passage

# Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms Condorcet and individual Rank Learning
# Methods" (SIGIR 2009): k = 60 damps the weight of the very top ranks, and needs no tuning per collection.
RRF_K = 60
DEPTH = 50  # each ranking's top passages that are fused
# A vector ranks every passage, the unrelated too: below this cosine a passage is no candidate of the vectors' (in
# all-MiniLM-L6-v2, unrelated text scores 0-0.2 and a paraphrase 0.3+), so a question doesn't fill its budget with
# passages that only happen to be nearest. Models with a higher floor (bge) just pass more on to the fusion.
MIN_SIMILARITY = 0.25

Ranking = Literal["bm25", "hybrid"]


@dataclass(frozen=True)
class Ranked:
    passages: list[Passage]  # best first
    ranking: Ranking
    embedder: str = ""  # the model's name when hybrid
    note: str = ""  # why an embedding model given was not used ("" when it was, or none was given)


def search_ranked(store: KnowledgeStore, names: list[str], query: str, *, limit: int,
                  embedder: Embedder | None) -> Ranked:
    """The top ``limit`` passages for ``query``: hybrid when ``embedder`` is given and the collections have
    vectors of its model, else BM25 (``note`` says why)."""
    if embedder is None or not names or limit <= 0 or not query.strip():
        return Ranked(store.search(names, query, limit=limit), "bm25")
    ids, matrix = store.vectors(names, embedder.model_id)
    if not len(ids):
        return Ranked(store.search(names, query, limit=limit), "bm25",
                      note=f"no passage has a vector of {embedder.name} yet: Sync embeds them")
    try:
        question = embedder.embed([query])[0]
    except EmbedderBroken as broken:
        return Ranked(store.search(names, query, limit=limit), "bm25", note=str(broken))
    similarity = matrix @ question
    depth = min(DEPTH, len(ids))
    nearest = np.argpartition(-similarity, depth - 1)[:depth]
    by_vector = [int(ids[i]) for i in nearest[np.argsort(-similarity[nearest], kind="stable")]
                 if similarity[i] >= MIN_SIMILARITY]
    by_words = store.search(names, query, limit=max(DEPTH, limit))
    fused: dict[int, float] = {}
    for ranked in ([p.passage_id for p in by_words], by_vector):
        for rank, passage_id in enumerate(ranked, 1):
            fused[passage_id] = fused.get(passage_id, 0.0) + 1.0 / (RRF_K + rank)
    words_rank = {p.passage_id: rank for rank, p in enumerate(by_words)}
    # A tie (BM25's first without a vector yet, the vectors' first without the words) goes to the words' match.
    best = sorted(fused, key=lambda pid: (-fused[pid], words_rank.get(pid, len(words_rank)), pid))[:limit]
    known = {p.passage_id: p for p in by_words}
    fetched = {p.passage_id: p for p in store.passages([pid for pid in best if pid not in known])}
    known.update(fetched)
    found = [replace(known[pid], score=fused[pid]) for pid in best if pid in known]
    return Ranked(found, "hybrid", embedder.name)
