"""The neutral suite (canitoolcall 0.1.1) as Nalar's split test data: which fixtures are in scope,
what each should show in the two panes, and the ways to cut a stream.

A fixture is in scope when its reasoning is spelt with ``<think>`` tags (or the family spells it so
and the fixture has none). Other formats are listed as out of scope. Nalar parses no tool calls,
so a tool-call case keeps the call's markup in the answer pane: that is its listed gap, and what is
checked there is that the text around the call is in the answer pane, in order.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from canitoolcall.chunking import DEFAULT_STRATEGIES, ChunkStrategy, split
from canitoolcall.fixtures import Fixture, load_fixtures

from app.engine.reply.reasoning import THINK_CLOSE, THINK_OPEN, ThinkStart, think_start_for_model, think_start_of_prompt

TAGS = (THINK_OPEN, THINK_CLOSE)
# Other reasoning formats, by a marker that only they use: not replayed here (this suite is the <think> tags'),
# but split by vLLM's own parsers for them and checked side by side in tests/engine/test_tool_fixtures.py.
_SIDE_BY_SIDE = "; split by vLLM's parser for it, checked in test_tool_fixtures.py"
OTHER_FORMATS = {
    "<|channel|>": "Harmony channels (gpt-oss): no <think> tags" + _SIDE_BY_SIDE + " (openai_gptoss, on the ids)",
    "<|channel>": "Gemma 4 channels: no <think> tags" + _SIDE_BY_SIDE + " (gemma4)",
    "[THINK]": "Mistral [THINK] blocks: Nalar shows the whole output, [THINK] markers included, in the answer pane "
               "(their ids need each model's own tekken.json)",
    "<|open|>": "Kimi K3 blocks: no <think> tags" + _SIDE_BY_SIDE + " (kimi_k3)",
    "<|close|>": "Kimi K3 blocks: no <think> tags" + _SIDE_BY_SIDE + " (kimi_k3)",
}
NO_REASONING_FAMILY = "no reasoning format in this family (Llama): Nalar shows the output in the answer pane"
TOOL_CALL_GAP = "Nalar parses no tool calls: the call's markup stays in the answer pane, among the text around it"
CALL_IN_THINK_GAP = ("Nalar parses no tool calls: a call written inside the think block stays in the thinking pane "
                     "(ours) or goes to the answer pane (vLLM's qwen3 parser)")


@cache
def all_fixtures() -> tuple[Fixture, ...]:
    return tuple(load_fixtures())


@cache
def family_markers(family: str) -> tuple[str, ...]:
    from canitoolcall.fixtures import load_family

    return load_family(family).markers


def out_of_scope_reason(fx: Fixture) -> str | None:
    markers = family_markers(fx.family)
    # A family without <think> is out whole; in a mixed family (Mistral, Kimi) the fixture's own text decides.
    text = fx.raw_output + (fx.generation_prompt or "") + ("" if THINK_OPEN in markers else " ".join(markers))
    if "x-kimi-k3" in fx.tags:  # its truncated cases show no marker, but the reasoning is still a K3 block
        text += "<|open|>"
    other = next((why for marker, why in OTHER_FORMATS.items() if marker in text), None)
    return other or (None if THINK_OPEN in markers else NO_REASONING_FAMILY)


def in_scope() -> list[Fixture]:
    return [fx for fx in all_fixtures() if out_of_scope_reason(fx) is None]


# Tool-call markup, per family (a truncated output may hold only the opening marker).
TOOL_MARKERS = ("<tool_call>", "<|tool_calls_section_begin|>", "[TOOL_CALLS]", "<｜tool▁calls▁begin｜>", "｜DSML｜")


def tool_call_gap(fx: Fixture) -> str | None:
    """Why Nalar can't show this fixture's expected content exactly, or None."""
    calls = bool(fx.expected and fx.expected.tool_calls) or fx.expected_error is not None
    if not calls and not any(marker in fx.raw_output for marker in TOOL_MARKERS):
        return None
    return CALL_IN_THINK_GAP if "x-call-inside-think" in fx.tags else TOOL_CALL_GAP


@dataclass(frozen=True)
class Panes:
    thinking: str
    answer: str

    def trimmed(self) -> Panes:
        return Panes(self.thinking.strip(), self.answer.strip())


def expected_panes(fx: Fixture) -> Panes:
    expected = fx.expected
    if expected is None:  # expected_error (truncated or malformed calls): no reasoning is expected
        return Panes("", "")
    return Panes((expected.reasoning_content or "").strip(), (expected.content or "").strip())


def thinking_on(fx: Fixture) -> bool:
    return fx.thinking is not False


def start_from_prompt(fx: Fixture) -> ThinkStart:
    """Where the reply starts when Nalar renders the prompt: the prompt's tail says, else the family."""
    from_prompt = think_start_of_prompt(fx.generation_prompt or "")
    return from_prompt or think_start_for_model(fx.reference_model, None, thinking_on(fx))


def start_from_model(fx: Fixture) -> ThinkStart:
    """Where the reply starts behind a remote server: Nalar knows only the model's name and the switch."""
    return think_start_for_model(fx.reference_model, None, thinking_on(fx))


def raw_panes(fx: Fixture) -> Panes:
    """What the panes must show by plain string rules on the raw output (no app code): the think block's text
    in the thinking pane, all that follows ``</think>`` in the answer pane, call markup included.
    The exact reference for the cases whose expected content Nalar can't show (tool calls, expected_error)."""
    stripped = fx.raw_output.lstrip()
    opened = stripped.startswith(THINK_OPEN)
    if start_from_prompt(fx) != "open" and not opened:
        return Panes("", fx.raw_output.strip())
    body = stripped[len(THINK_OPEN):] if opened else stripped
    thinking, closed, answer = body.partition(THINK_CLOSE)
    return Panes(thinking.strip(), answer.strip() if closed else "")


def check(fx: Fixture, got: Panes) -> None:
    """Pass = the expected panes (trimmed), no tag in either. A tool-call case (its markup stays in the answer
    pane) is checked exactly against ``raw_panes``, and its expected thinking, where the suite has one, exactly."""
    gap = tool_call_gap(fx)
    for tag in TAGS:
        if fx.expected and tag in (fx.expected.content or "") + (fx.expected.reasoning_content or ""):
            continue
        assert tag not in got.thinking, (fx.id, tag, got)
        # A tool call's arguments may quote a tag: with the call's markup, it stays in the answer pane.
        assert tag not in got.answer or (gap == TOOL_CALL_GAP and in_call(fx, tag)), (fx.id, tag, got)
    want, have = expected_panes(fx), got.trimmed()
    if gap is None:
        assert have == want, f"{fx.id}: panes {have} != expected {want}"
    elif gap == CALL_IN_THINK_GAP:  # where the call goes depends on the path: what precedes it is checked
        assert have.thinking.startswith(want.thinking) and in_order(want.answer, have.answer), (fx.id, have)
    else:  # the call's markup stays in the answer pane, with the text around it: exact against the raw output
        if fx.expected is not None:
            assert have.thinking == want.thinking, f"{fx.id}: thinking {have.thinking!r} != {want.thinking!r}"
        assert have == raw_panes(fx), f"{fx.id}: panes {have} != the raw output's {raw_panes(fx)}"
        assert in_order(want.answer, have.answer), (fx.id, have)


def in_call(fx: Fixture, tag: str) -> bool:
    """The tag occurs inside the tool-call markup of the output."""
    first_call = min((fx.raw_output.find(m) for m in TOOL_MARKERS if m in fx.raw_output), default=-1)
    return first_call >= 0 and tag in fx.raw_output[first_call:]


def in_order(part: str, whole: str) -> bool:
    """Every character of ``part`` appears in ``whole``, in the same order."""
    rest = iter(whole)
    return all(char in rest for char in part)


# ---- cuts ---------------------------------------------------------------------------------------

TEXT_STRATEGIES: tuple[ChunkStrategy, ...] = (*DEFAULT_STRATEGIES, ChunkStrategy("char", seed=1))


def text_units(text: str) -> list[str]:
    """Characters, with each think tag as one unit (a tag is one token in every family that has it)."""
    return [piece for piece in re.split(r"(</?think>)", text) for piece in ([piece] if piece in TAGS else piece)]


def text_cuts(text: str, strategies: Sequence[ChunkStrategy] = TEXT_STRATEGIES) -> dict[str, list[str]]:
    """Deltas per strategy: whole, each tag alone, per character (tags whole), seeded random groups,
    and per character with the tags cut too."""
    units = text_units(text)
    cuts = {}
    for strategy in strategies:
        if strategy.kind == "char":
            rng = random.Random(strategy.seed)
            bounds = sorted({rng.randrange(1, max(2, len(text))) for _ in range(len(text) // 2)} | {0, len(text)})
            cuts[strategy.id] = [text[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
        else:
            cuts[strategy.id] = ["".join(group) for group in split(units, strategy, special=set(TAGS))]
        assert "".join(cuts[strategy.id]) == text
    return cuts


def token_deltas(tokenizer: Any, ids: Sequence[int], strategy: ChunkStrategy,
                 special: set[int]) -> list[tuple[str, list[int]]]:
    """Token groups as an engine's incremental detokenizer streams them: text that ends inside a
    multi-byte character waits for the next group."""
    deltas: list[tuple[str, list[int]]] = []
    pending: list[int] = []
    groups = split(list(ids), strategy, special=special)
    for index, group in enumerate(groups):
        pending += group
        # Byte-level BPE: the text of a run of ids is the difference it makes, unless a character is cut.
        text = tokenizer.decode(pending, skip_special_tokens=False)
        if text.endswith("\ufffd") and index < len(groups) - 1:
            continue
        deltas.append((text, pending))
        pending = []
    return deltas
