"""Earlier thinking in context: each earlier turn's "keep its thinking" switch, and what keeping it costs.

Off by default, as the model cards say (Qwen3, R1: history holds only the final answers; Harmony drops the
analysis between user turns and keeps it between tool calls). When a turn's switch is on, the model reads its
thinking the way the family's template writes a reply's: ``<think>…</think>`` before the answer for the
tag families, the analysis channel for Harmony (rendered by the engine; see engine.local.reply_prompt).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.core.chat.conversation import Conversation, Turn

KEPT_KEY = "kept_thinking"  # the assistant message's field that carries a kept turn's thinking to the engine


def think_block(thinking: str, tags: tuple[str, str] | None = None) -> str:
    """How Qwen3's and R1's templates write a reply's thinking before its answer; ``tags``: a family's own
    control tokens (Magistral's [THINK] … [/THINK]), written with nothing round them, as the model writes them."""
    if tags is not None:
        return f"{tags[0]}{thinking.strip()}{tags[1]}"
    return f"<think>\n{thinking.strip()}\n</think>\n\n"


@dataclass(frozen=True)
class KeepSwitch:
    """One earlier turn's switch as the thread shows it."""

    index: int  # the turn's place on the shown branch
    on: bool
    cost: int | None  # tokens its thinking adds to every later prompt; None: not counted yet
    left: int | None  # tokens of context left after this turn (its kept thinking, and the earlier turns', counted)
    estimate: bool = False  # counted with an estimate, not the model's tokenizer

    @property
    def label(self) -> str:
        about = "≈" if self.estimate else ""
        state = "on" if self.on else "off"
        if self.cost is None or self.left is None:
            return f"Keep its thinking: {state} (counting tokens…)"
        return f"Keep its thinking: {state} ({about}{self.cost:,} tokens; {about}{self.left:,} left here)"


def counted_texts(conversation: Conversation) -> list[str]:
    """Every text ``keep_switches`` and the context gauge count: the questions, the answers and each thinking as
    the model would read it kept."""
    texts = []
    for turn in conversation.turns:
        texts += [turn.user, turn.answer]
        if turn.thinking.strip():
            texts.append(think_block(turn.thinking))
    return texts


def keep_switches(conversation: Conversation, count: Callable[[str], int | None], context_tokens: int,
                  estimate: bool = False) -> list[KeepSwitch | None]:
    """The switch of every shown turn before the last that has thinking (None for the others), with its cost in
    ``count``'s tokens against the context left after that turn: the questions, answers and kept thinking up to
    it. Up to it, not up to the newest turn, so a turn's line reads the same after later sends (the thread appends
    them without drawing the earlier turns again); the context gauge shows what is left now. A text ``count``
    has no figure for yet (None: it is being counted) leaves that switch's figures, and the later ones', unknown."""
    used: int | None = 0
    switches: list[KeepSwitch | None] = []
    for i, turn in enumerate(turns := conversation.turns):
        thinks = bool(turn.thinking.strip())
        cost = count(think_block(turn.thinking)) if thinks else 0
        parts = (count(turn.user), count(turn.answer), cost if turn.keep_thinking else 0)
        used = None if used is None or None in parts else used + sum(part or 0 for part in parts)
        switches.append(KeepSwitch(i, turn.keep_thinking, cost, None if used is None else max(0, context_tokens - used),
                                   estimate) if thinks and i < len(turns) - 1 else None)
    return switches


def toggle(turn: Turn) -> bool:
    """Flip a turn's switch; its new state."""
    turn.keep_thinking = not turn.keep_thinking
    return turn.keep_thinking
