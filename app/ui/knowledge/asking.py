"""Asking over the chat's knowledge collections: before a question is sent, the top passages are looked up on a
worker thread (the one runner) and put before the question within a token budget taken from the context left.

The budget reuses the attachments' arithmetic (``context_fit``): the conversation so far, the question with its
files, and room for the reply are taken from the context first; the passages get what is left, up to
MAX_KNOWLEDGE_TOKENS. What was put in ("6 passages, 1,840 tokens (BM25)", or "(hybrid: BM25 + all-MiniLM-L6-v2)"
when the index's embedding model is found and has embedded them) is kept with the turn and shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject

from app.core.chat.chat_settings import effective
from app.core.chat.conversation import Conversation, Source, TurnKnowledge
from app.core.knowledge.context import KnowledgeContext, knowledge_for
from app.core.knowledge.embedder import find_embedder
from app.core.knowledge.store import KnowledgeStore
from app.core.models.token_count import ContextFit, TokenCounter
from app.core.settings.settings import Settings
from app.ui.chat.attachments_bar import context_fit, model_counter
from app.ui.controllers.operations import run_blocking

MAX_KNOWLEDGE_TOKENS = 4000  # more passages than this rarely help, and each costs prefill time on a CPU
MIN_KNOWLEDGE_TOKENS = 64  # less room than this: no passage fits, the question goes without
MARGIN_TOKENS = 16  # the blank line between the block and the question, and the chat template's own tokens


def knowledge_budget(fit: ContextFit) -> int:
    """The tokens the passages may take: what the context has left once the conversation, the question and the
    reply's room are counted, less a margin, up to MAX_KNOWLEDGE_TOKENS; 0 when less than MIN_KNOWLEDGE_TOKENS."""
    left = fit.context_tokens - fit.used_tokens - fit.reply_tokens - MARGIN_TOKENS
    return min(left, MAX_KNOWLEDGE_TOKENS) if left >= MIN_KNOWLEDGE_TOKENS else 0


def turn_knowledge(context: KnowledgeContext, budget: int) -> TurnKnowledge | None:
    """What the turn keeps of a look-up: the block the model reads, the sources to show; None: nothing found."""
    if not context.passages:
        return None
    sources = tuple(Source(p.collection, str(p.path), p.page, p.line_start, p.line_end, p.text)
                    for p in context.passages)
    return TurnKnowledge(context.summary(), context.prompt_block(), sources, budget)  # its header asks for [1]


def chat_collections(conversation: Conversation, settings: Settings) -> tuple[str, ...]:
    """The collections the chat asks over: its own values', else the default preset's."""
    return effective(conversation.settings, settings.presets).values.knowledge


@dataclass(frozen=True)
class LookUp:
    """What a look-up found, and the line the window shows about it."""

    knowledge: TurnKnowledge | None
    note: str


def look_up_blocking(store_path: Path, collections: list[str], question: str, budget: int,
                     counter: TokenCounter) -> LookUp:
    """On a worker thread: its own connection to the index. The block is counted with the model's tokenizer
    where it has one, else estimated: the same count as the budget's (context_fit)."""
    store = KnowledgeStore(store_path)
    try:
        known = {collection.name for collection in store.collections()}
        asked = [name for name in collections if name in known]
        gone = [name for name in collections if name not in known]
        missing = f" ({', '.join(gone)}: no such collection now)" if gone else ""
        if not asked:
            return LookUp(None, f"Knowledge not used: no collection of this chat's exists now{missing}.")
        choice = find_embedder(store.embedder_setting())  # the model loads here, on the worker, once a process
        context = knowledge_for(store, asked, question, token_budget=budget, count_tokens=counter.count,
                                embedder=choice.embedder)
        found = turn_knowledge(context, budget)
    finally:
        store.close()
    if problem := context.note or choice.problem:
        missing += f" (ranked by BM25: {problem})"
    if found is None:
        return LookUp(None, f"No passage of {', '.join(asked)} matched this question; it went without.{missing}")
    return LookUp(found, f"Knowledge: {found.summary} of {budget:,} tokens left for them{missing}.")


class KnowledgeAsking(QObject):
    """Looks up a question's passages before the window sends it; ``busy`` while one runs (a second send waits).
    ``last`` is what the latest look-up found and says (the window shows it under the reply it starts)."""

    def __init__(self, store_path: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.store_path = store_path
        self.busy = False
        self.last: LookUp | None = None

    async def look_up(self, conversation: Conversation, settings: Settings, query: str,
                      asked: str) -> TurnKnowledge | None:
        """The passages for ``query`` (the user's words) from the chat's collections, within what ``asked`` (the
        question as sent, files included) leaves of the context; None when the chat has none on or none fit."""
        self.last = None
        collections = chat_collections(conversation, settings)
        if not collections:
            return None
        counter = model_counter(settings)
        budget = knowledge_budget(context_fit(settings, conversation, asked, counter))
        if budget == 0:
            self.last = LookUp(None, "Knowledge not used: the context has no room left for passages. Start a new "
                               "chat, lower Max answer tokens or the think budget, or raise the context length.")
            return None
        self.busy = True
        try:
            found = await run_blocking("Looking up the chat's knowledge", lambda: look_up_blocking(
                self.store_path, list(collections), query, budget, counter), parent=self)
        except Exception as exc:  # the question still goes, without passages, and the user is told why
            self.last = LookUp(None, f"Knowledge not used: the index can't be read ({type(exc).__name__}: {exc}).")
            return None
        finally:
            self.busy = False
        self.last = found
        return found.knowledge
