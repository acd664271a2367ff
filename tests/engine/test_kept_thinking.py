"""Earlier thinking in context: the switch's cost, its storage, and the prompt holding a turn's thinking only when
its switch is on, written as the family's template writes a reply (the embedded model's real tokenizer, an
R1-style template that cuts thinking out of history, and Harmony's renderer; no engine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore
from app.core.models.model_families import PLAIN
from app.core.settings.settings import SamplingConfig
from app.core.steering.kept_thinking import keep_switches, think_block, toggle
from app.engine.local.reply_prompt import ReplyPrompts
from app.engine.reply.harmony import harmony_prompt_ids
from app.engine.reply.tool_calls import without_reasoning
from app.engine.requests import MessageSpec
from tests.conftest import require_embedded_model

# R1's own rule, as its template has it: an assistant message loses everything up to </think>.
R1_STYLE = ("{% for m in messages %}{% set c = m['content'] %}"
            "{% if m['role'] == 'assistant' and '</think>' in c %}{% set c = c.split('</think>')[-1] %}{% endif %}"
            "<|im_start|>{{ m['role'] }}\n{{ c }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
THOUGHT = "Two and two make four, so doubling gives eight."


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(require_embedded_model()))


def chat(keep: bool) -> Conversation:
    conversation = Conversation(turns=[Turn(user="2+2?", thinking=THOUGHT, answer="4", finish_reason="stop"),
                                       Turn(user="Double it?")])
    conversation.turns[0].keep_thinking = keep
    return conversation


def prompt(tokenizer: Any, conversation: Conversation, template: str | None = None) -> str:
    if template is not None:
        tokenizer.chat_template = template
    prompts = ReplyPrompts(tokenizer, PLAIN, 2048, reasoning_mode=True)
    ids, _ = prompts.for_reply(conversation.messages(), SamplingConfig(think_budget=64), thinking_on=True, offer=None)
    return str(tokenizer.decode(ids))


def test_the_prompt_holds_an_earlier_thinking_only_when_its_switch_is_on(tokenizer: Any) -> None:
    """Bug caught: earlier thinking sent although its switch is off (the cards' default), or dropped although it is
    on, or written elsewhere than as a think block before that answer."""
    template = tokenizer.chat_template
    try:
        assert THOUGHT not in prompt(tokenizer, chat(keep=False))
        kept = prompt(tokenizer, chat(keep=True))
        assert kept.count(THOUGHT) == 1 and think_block(THOUGHT) + "4" in kept
        # R1's template cuts thinking out of history; the kept one still reaches the prompt, once, in its place.
        assert THOUGHT not in prompt(tokenizer, chat(keep=False), R1_STYLE)
        r1 = prompt(tokenizer, chat(keep=True), R1_STYLE)
        assert f"<|im_start|>assistant\n{think_block(THOUGHT)}4<|im_end|>" in r1 and r1.count(THOUGHT) == 1
    finally:
        tokenizer.chat_template = template


def test_harmony_keeps_a_kept_turns_analysis_and_drops_the_others() -> None:
    """Bug caught: gpt-oss's earlier analysis either always dropped (the switch did nothing) or, once one turn
    keeps it, every turn's analysis kept (Harmony's rule is the default for the others)."""
    from vllm.entrypoints.openai.parser.harmony_utils import get_encoding

    conversation = Conversation(turns=[Turn(user="a?", thinking="KEPT-THOUGHT", answer="A"),
                                       Turn(user="b?", thinking="DROPPED-THOUGHT", answer="B"), Turn(user="c?")])
    off = get_encoding().decode(harmony_prompt_ids(conversation.messages()))
    assert "KEPT-THOUGHT" not in off and "DROPPED-THOUGHT" not in off
    conversation.turns[0].keep_thinking = True
    on = get_encoding().decode(harmony_prompt_ids(conversation.messages()))
    assert "<|channel|>analysis<|message|>KEPT-THOUGHT<|end|>" in on and "DROPPED-THOUGHT" not in on


def test_kept_thinking_crosses_the_engine_pipe_and_never_reaches_a_server() -> None:
    """Bug caught: the engine process's typed message losing the field (the switch did nothing in the app), or a
    remote server getting a field OpenAI's API refuses."""
    message = chat(keep=True).messages()[1]
    assert MessageSpec.from_openai(message).as_openai()["kept_thinking"] == THOUGHT
    assert "kept_thinking" not in without_reasoning([message])[0]
    assert "kept_thinking" not in chat(keep=False).messages()[1]


def test_the_switch_shows_its_cost_against_the_context_left() -> None:
    """Bug caught: a cost shown for the last turn (no later prompt reads it), for a turn without thinking, or a
    context left that forgets the thinking already kept, or that changes with later turns (the thread appends a
    send without drawing earlier turns again, so their lines would go stale)."""
    words = len  # one token a character: the arithmetic is checked, not a tokenizer
    conversation = Conversation(turns=[Turn(user="q1", thinking="abcdef", answer="a1"), Turn(user="q2", answer="a2"),
                                       Turn(user="q3", thinking="xyz", answer="")])
    first, second, last = keep_switches(conversation, words, context_tokens=1000)
    assert second is None and last is None and first is not None
    cost = len(think_block("abcdef"))
    assert (first.on, first.cost, first.left) == (False, cost, 1000 - 4)
    toggle(conversation.turns[0])
    kept = keep_switches(conversation, words, 1000, estimate=True)[0]
    assert kept is not None and kept.left == 1000 - 4 - cost
    assert kept.label == f"Keep its thinking: on (≈{cost:,} tokens; ≈{kept.left:,} left here)"
    conversation.add_turn(Turn(user="a much longer fourth question"))
    assert keep_switches(conversation, words, 1000, estimate=True)[0] == kept, "later turns leave its line as it was"


def test_the_switch_is_stored_with_the_turn(tmp_path: Path) -> None:
    """Bug caught: the switch lost on reopening (the schema 9 column never written or read), or a fork dropping it."""
    history = HistoryStore(tmp_path / "history.sqlite3")
    conversation = chat(keep=False)
    history.add_conversations([conversation])
    toggle(conversation.turns[0])
    history.set_keep_thinking(conversation.turns[0])
    history.add_conversations([conversation.fork(1)])
    history.close()
    reopened = HistoryStore(tmp_path / "history.sqlite3").conversations()
    assert [c.turns[0].keep_thinking for c in reopened] == [True, True]
    assert [c.turns[1].keep_thinking for c in reopened] == [False, False]
