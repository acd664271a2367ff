"""Conversations as plain data: turns of user text, thinking, tool calls and answer, kept as a tree.

A turn's ``parent`` is the turn it follows; turns with the same parent are siblings (an edited question,
a regenerated reply). ``Conversation.turns`` is the branch shown, from the first turn to the shown leaf:
what the window draws and what the model reads. ``Conversation.tree`` holds every turn of every branch.
"""

from __future__ import annotations

import json
import os
import uuid
from copy import deepcopy
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from app.core.chat.chat_settings import ChatSettings
from app.core.chat.images import ImagePart, with_images

# A chat message in OpenAI's shape: {"role", "content"}; an assistant's may also carry "tool_calls"
# ([{"id", "type": "function", "function": {"name", "arguments": JSON text}}], content then "" or None),
# and a {"role": "tool", "tool_call_id", "content"} message carries a call's result.
Message = dict[str, Any]
NOT_RUN = "The call did not run: the reply was stopped before it was approved."


@dataclass
class ToolStep:
    """One tool call in a reply and what became of it: pending (waiting for approval), running, ok, error,
    timeout, denied or stopped."""

    call_id: str
    name: str
    arguments: str  # JSON text, as the model wrote it
    server: str = ""
    result: str = ""
    status: str = "pending"

    @property
    def done(self) -> bool:
        return self.status not in ("pending", "running")


@dataclass
class ToolRound:
    """A step of a reply that called tools: what it thought (and wrote) before the calls, and the calls."""

    thinking: str
    calls: list[ToolStep]
    content: str = ""  # answer text written before the calls (usually none)

    def messages(self) -> list[Message]:
        """The assistant's calls and one tool message per call, as the model reads them back. The thinking that
        led to the calls goes with them as ``reasoning`` (vLLM's field): Harmony keeps it between tool calls
        and drops it once the turn has its final answer; local chat templates don't get it (template_messages)."""
        calls = [{"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                 for c in self.calls]
        thought = {"reasoning": self.thinking.strip()} if self.thinking.strip() else {}
        return [{"role": "assistant", "content": self.content, "tool_calls": calls, **thought},
                *({"role": "tool", "tool_call_id": c.call_id, "content": c.result if c.done else NOT_RUN}
                  for c in self.calls)]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolRound:
        return cls(data.get("thinking", ""), [ToolStep(**call) for call in data.get("calls", [])],
                   data.get("content", ""))


@dataclass(frozen=True)
class ThinkingEdit:
    """The user paused the thinking and changed it: the thinking as the model had written it (``original``)
    and what the reply went on from (``edited``). Whole texts, so either version reads back as it was."""

    original: str
    edited: str

    @property
    def at(self) -> int:
        """Where the user's change begins: the length of what both versions share."""
        return len(os.path.commonprefix([self.original, self.edited]))

    @property
    def inserted(self) -> str:
        """The user's text from ``at`` to the end of the edited thinking (a whole rewrite, or an added note)."""
        return self.edited[self.at:]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ThinkingEdit:
        return cls(str(data.get("original", "")), str(data.get("edited", "")))


@dataclass(frozen=True)
class Source:
    """A passage of a knowledge collection that a question was asked with: the model cites it as [n], n its place
    in ``TurnKnowledge.sources`` from 1. Its text is kept with the turn, so a reload shows what the model read."""

    collection: str
    path: str  # absolute; inside one of the collection's folders when it was read
    page: int | None  # 1-based PDF page
    line_start: int | None  # 1-based line span of a text file
    line_end: int | None
    text: str

    @property
    def place(self) -> str:
        """"page 4", "lines 3-9", "line 3", or "" where the index gave neither (as Passage.place writes it)."""
        if self.page is not None:
            return f"page {self.page}"
        if self.line_start is None:
            return ""
        end = self.line_end or self.line_start
        return f"line {self.line_start}" if end == self.line_start else f"lines {self.line_start}-{end}"


@dataclass(frozen=True)
class TurnKnowledge:
    """What a question was asked with from the chat's knowledge collections: the passages the model read before
    it (``block``, exactly as sent), the same passages as sources to show and open, the line the window shows
    ("6 passages, 1,840 tokens (BM25)") and the budget they were chosen within (the context left for them)."""

    summary: str
    block: str
    sources: tuple[Source, ...]
    budget: int = 0

    def to_json(self) -> str:
        return json.dumps({"summary": self.summary, "block": self.block, "budget": self.budget,
                           "sources": [asdict(source) for source in self.sources]}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> TurnKnowledge | None:
        """The stored cell; None for '' (asked without knowledge). Raises ValueError, KeyError or TypeError for
        a damaged cell (the history logs it and shows the turn without its sources)."""
        if not text:
            return None
        data = json.loads(text)
        sources = tuple(Source(str(s["collection"]), str(s["path"]), _int_or_none(s.get("page")),
                               _int_or_none(s.get("line_start")), _int_or_none(s.get("line_end")), str(s["text"]))
                        for s in data["sources"])
        return cls(str(data["summary"]), str(data["block"]), sources, int(data.get("budget", 0)))


def _int_or_none(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def asked(turn: Turn) -> str:
    """The question as the model reads it: the knowledge's passages first, when it was asked with some."""
    return f"{turn.knowledge.block}\n\n{turn.user}" if turn.knowledge is not None else turn.user


@dataclass
class Turn:
    user: str
    thinking: str = ""
    answer: str = ""
    finish_reason: str | None = None  # None while the reply streams
    thinking_tokens: int = 0
    answer_tokens: int = 0
    ttft_s: float | None = None
    answer_tok_s: float = 0.0
    message_id: int | None = None  # its row in the history database
    model: str = ""
    kv_cache_dtype: str = ""
    backend: str = ""  # which backend answered: "local" or a remote profile's name
    loop_guard: str = ""  # what the loop guard found and did, one line per loop (LoopDetected.summary)
    tool_rounds: list[ToolRound] = field(default_factory=list)  # the calls before ``thinking`` and ``answer``
    keep_thinking: bool = False  # later turns' prompts hold this turn's thinking (off: the cards' rule)
    thinking_edits: list[ThinkingEdit] = field(default_factory=list)  # pause, edit, resume: oldest first
    images: tuple[ImagePart, ...] = ()  # the question's images (a vision model reads them with ``user``)
    knowledge: TurnKnowledge | None = None  # the passages of the chat's collections it was asked with
    parent: Turn | None = field(default=None, repr=False, compare=False)  # None: a first question

    def copy(self, parent: Turn | None) -> Turn:
        """The same turn, every field, as a new row (no ``message_id``) under ``parent``."""
        return replace(self, message_id=None, parent=parent, tool_rounds=deepcopy(self.tool_rounds),
                       thinking_edits=list(self.thinking_edits))


@dataclass
class Conversation:
    title: str = "New conversation"
    turns: list[Turn] = field(default_factory=list)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    thinking: bool = True  # the chat's Think switch
    tools: bool = False  # the chat's Tools switch
    settings: ChatSettings | None = None  # the chat's preset values (chat_settings); None: the default preset
    tree: list[Turn] = field(default_factory=list, repr=False)  # every turn, in the order they were made

    def __post_init__(self) -> None:
        """Turns given without a tree are one branch, each following the one before."""
        for before, turn in zip([None, *self.turns], self.turns, strict=False):
            if turn.parent is None:
                turn.parent = before
        if not self.tree:
            self.tree = list(self.turns)

    @property
    def leaf(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    def add_turn(self, turn: Turn) -> Turn:
        """A new question after the shown leaf; it becomes the leaf."""
        turn.parent = self.leaf
        self.tree.append(turn)
        self.turns.append(turn)
        return turn

    def children(self, parent: Turn | None) -> list[Turn]:
        return [turn for turn in self.tree if turn.parent is parent]

    def siblings(self, index: int) -> tuple[int, int]:
        """Where the shown turn at ``index`` stands among the tries of that point: (0-based place, count)."""
        turn = self.turns[index]
        tries = self.children(turn.parent)
        return tries.index(turn), len(tries)

    def branch_places(self) -> list[tuple[int, int]]:
        """``siblings`` for every shown turn in one pass over the tree (a 500-turn thread draws in one go)."""
        tries: dict[int, list[Turn]] = {}
        for turn in self.tree:
            tries.setdefault(id(turn.parent), []).append(turn)
        places = []
        for turn in self.turns:
            same = tries.get(id(turn.parent), [turn])
            places.append((0, 1) if len(same) == 1 else  # the usual turn, without a search (16,000 turns: 90 → 8 ms)
                          (next(i for i, other in enumerate(same) if other is turn), len(same)))
        return places

    def newest_branch_point(self) -> int | None:
        """The index of the last shown turn that has other tries (what Alt+Left/Right switch), or None."""
        places = self.branch_places()
        return next((i for i in reversed(range(len(places))) if places[i][1] > 1), None)

    def show(self, turn: Turn) -> None:
        """Show the branch through ``turn``, down to its newest leaf. One pass over the tree for the newest child
        of each turn, not one per level (a 16,000-turn chat shown from its first turn)."""
        newest: dict[int, Turn] = {}
        for each in self.tree:
            newest[id(each.parent)] = each
        while (child := newest.get(id(turn))) is not None:
            turn = child
        path = []
        node: Turn | None = turn
        while node is not None:
            path.append(node)
            node = node.parent
        self.turns[:] = path[::-1]

    def switch_branch(self, index: int, step: int) -> bool:
        """Show the previous (-1) or next (+1) sibling of the turn at ``index``; False at either end."""
        place, count = self.siblings(index)
        if not 0 <= place + step < count:
            return False
        self.show(self.children(self.turns[index].parent)[place + step])
        return True

    def branch_at(self, index: int, user: str | None = None) -> Turn:
        """A new sibling of the turn at ``index``: its question edited (``user``) or asked again (Regenerate).
        The old branch stays; the new turn becomes the shown leaf, waiting for its reply."""
        old = self.turns[index]
        turn = Turn(user=old.user if user is None else user, parent=old.parent, images=old.images,
                    knowledge=old.knowledge)
        self.tree.append(turn)
        self.turns[index:] = [turn]
        return turn

    def fork(self, index: int) -> Conversation:
        """"New chat from here": the shown branch up to the turn at ``index``, copied into a new conversation."""
        forked = Conversation(title=f"{self.title} (fork)", thinking=self.thinking, tools=self.tools,
                              settings=self.settings)
        for turn in self.turns[:index + 1]:
            forked.add_turn(turn.copy(forked.leaf))
        return forked

    def delete_branch(self, index: int) -> list[Turn]:
        """Delete the turn at ``index`` and everything after it on every branch below it; the nearest sibling
        (else the parent) is shown. Returns the turns deleted, the first one their root."""
        root = self.turns[index]
        place, _count = self.siblings(index)
        gone, gone_ids = [root], {id(root)}
        for turn in self.tree:  # parents come before their children in ``tree``
            if id(turn.parent) in gone_ids and turn is not root:
                gone.append(turn)
                gone_ids.add(id(turn))
        self.tree = [turn for turn in self.tree if id(turn) not in gone_ids]
        tries = self.children(root.parent)
        if tries:
            self.show(tries[max(0, place - 1)])
        elif root.parent is not None:
            self.show(root.parent)
        else:
            self.turns.clear()
        return gone

    def messages(self) -> list[Message]:
        """The chat so far for the model: earlier answers without their thinking (with it, as ``kept_thinking``,
        where that turn's switch keeps it), then the last user turn with the tool calls its reply made so far and
        their results."""
        messages: list[Message] = []
        for turn in self.turns[:-1]:
            messages.append({"role": "user", "content": with_images(turn.user, turn.images)})
            for tool_round in turn.tool_rounds:
                messages += tool_round.messages()
            if turn.answer:
                kept = {"kept_thinking": turn.thinking.strip()} if turn.keep_thinking and turn.thinking.strip() else {}
                messages.append({"role": "assistant", "content": turn.answer, **kept})
        if self.turns:
            # Only the question being answered carries its passages: each question gets its own, and earlier
            # ones' passages would take the context again at every send.
            messages.append({"role": "user", "content": with_images(asked(self.turns[-1]), self.turns[-1].images)})
            for tool_round in self.turns[-1].tool_rounds:
                messages += tool_round.messages()
        return messages

    def title_from_first_message(self) -> None:
        if self.turns and self.title == "New conversation":
            first = " ".join(self.turns[0].user.split())
            self.title = first[:40] + ("…" if len(first) > 40 else "")
