"""What of a collection goes into the prompt: the top passages within a token budget, numbered for citations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.core.knowledge.store import KnowledgeStore, Passage


@dataclass(frozen=True)
class KnowledgeContext:
    passages: tuple[Passage, ...]  # numbered [1], [2], … in this order
    tokens: int
    ranking: Literal["bm25", "hybrid"]

    def summary(self) -> str:
        """"6 passages, 1,840 tokens (BM25)"."""
        raise NotImplementedError

    def prompt_block(self) -> str:
        """The text put before the question, passages numbered, with file/page/line."""
        raise NotImplementedError


def knowledge_for(store: KnowledgeStore, collections: list[str], question: str, *,
                  token_budget: int) -> KnowledgeContext:
    raise NotImplementedError
