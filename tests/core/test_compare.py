"""Compare's decisions without an engine: the agreement line, the variants' sampling, and the variants as
sibling turns of the question, one kept as the chat's branch, all on a real SQLite file."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore
from app.core.settings.settings import MAX_THINK_BUDGET, SamplingConfig
from app.core.steering.compare import Comparison, Variant, agreement, final_number, normalise


def test_a_number_written_differently_agrees() -> None:
    """Bug caught: "x = 3.50" and "3.5" called different answers because their text differs."""
    line = agreement(["So x = 3.50.", "The answer is **3.5**"])
    assert not line.same_text and line.numbers_agree and line.agree
    assert line.line == "The final numbers agree (3.5); the wording differs."


def test_different_final_numbers_differ_and_are_named() -> None:
    """Bug caught: 12 and 13 called agreeing because both answers hold a number (or the same words)."""
    line = agreement(["The total is 12 apples.", "The total is 13 apples."])
    assert not line.agree and line.numbers_agree is False
    assert line.line == "The answers differ: final numbers 12 · 13."


def test_the_same_text_normalised_agrees() -> None:
    """Bug caught: case, Markdown marks, spacing or a final full stop making equal answers differ."""
    assert normalise("  The answer is **Paris**.\n") == normalise("the answer is  Paris")
    assert agreement(["The answer is **Paris**.", "the answer is Paris"]).line == \
        "The answers agree: the same text, once normalised."


def test_answers_without_numbers_and_a_missing_answer() -> None:
    """Bug caught: an empty answer (a variant stopped before it answered) counted as agreeing with another, and
    a line claiming numbers where the answers have none."""
    assert agreement(["Paris", "London"]).line == "The answers differ (no final numbers to compare)."
    assert not agreement(["", ""]).same_text
    assert agreement(["It is 4", ""]).line == "The answers differ: final numbers 4 · none."


@pytest.mark.parametrize(("answer", "number"), [
    ("x = 3.50", Fraction(7, 2)), ("1,000 people", Fraction(1000)), ("about -2", Fraction(-2)),
    ("so 3/4 of it", Fraction(3, 4)), ("first 7, then \\boxed{42} (check: 6*7)", Fraction(42)),
    ("no digits here", None), ("step 2 gives 10", Fraction(10)),
    ("p = 25.00 dollars: 80% of $25 is $20.", Fraction(25)),
    ("The answer is 12, as 3 * 4 = 12 and 5 - 5 = 0", Fraction(12)),
    ("p = 20 / 0.8 = 25.", Fraction(25))])
def test_the_final_number_is_the_last_or_the_boxed_one(answer: str, number: Fraction | None) -> None:
    """Bugs caught: the first number of a worked answer (a step's) compared instead of its result, or a check
    written after the result ("80% of 25 is 20") taken for it."""
    assert final_number(answer) == number


def test_variants_change_only_their_own_fields_of_the_chats_sampling() -> None:
    """Bug caught: a variant dropping the chat's other sampling (max tokens, top-p) or its Think switch."""
    base = SamplingConfig(temperature=0.6, think_budget=512, max_tokens=99, top_p=0.9, thinking=True)
    off, budget, unlimited, warm = (v.sampling(base) for v in (
        Variant.think_off(), Variant.budget(64), Variant.unlimited(), Variant.at_temperature(1.2)))
    assert (off.thinking, off.think_budget, off.max_tokens) == (False, 512, 99)
    assert (budget.thinking, budget.think_budget, budget.top_p) == (True, 64, 0.9)
    assert unlimited.think_budget == MAX_THINK_BUDGET
    assert (warm.temperature, warm.thinking, warm.think_budget) == (1.2, True, 512)


def test_a_preset_variant_needs_the_presets_lookup() -> None:
    """The place left for presets: a preset's sampling replaces the chat's, then the variant's own fields apply."""
    preset = Variant("Precise", preset="precise", temperature=0.1)
    with pytest.raises(ValueError, match="precise"):
        preset.sampling(SamplingConfig())
    found = preset.sampling(SamplingConfig(), lambda name: SamplingConfig(max_tokens=7) if name == "precise" else None)
    assert (found.max_tokens, found.temperature) == (7, 0.1)


def test_the_variants_are_siblings_and_the_kept_one_is_the_branch(tmp_path: Path) -> None:
    """Bug caught: Compare's replies replacing the question's turn, or nested under one another, or the kept one
    not reopening as the chat's branch; the others must stay as tries of the question, saved on the file."""
    history = HistoryStore(tmp_path / "history.sqlite3")
    conversation = Conversation(title="c")
    history.save_conversation(conversation)
    first = conversation.add_turn(Turn(user="2+2?", thinking="t", answer="4", finish_reason="stop"))
    history.start_turn(conversation, first)
    history.finish_turn(first)
    question = conversation.add_turn(Turn(user="Double it?", answer="8", finish_reason="stop"))
    history.start_turn(conversation, question)
    history.finish_turn(question)
    ticks = iter(range(100))
    comparison = Comparison(conversation, 1, [Variant.think_off(), Variant.budget(8), Variant.unlimited()],
                            clock=lambda: float(next(ticks)))
    for n, run in enumerate(comparison.runs):
        history.start_turn(conversation, run.turn)
        comparison.start(run)
        comparison.finish(run, "stop", f"thought {n}", f"It is {8 + n}.")
        history.finish_turn(run.turn)
    assert comparison.done and [run.elapsed_s for run in comparison.runs] == [1.0, 1.0, 1.0]
    assert comparison.agreement().line == "The answers differ: final numbers 8 · 9 · 10."
    kept = comparison.keep(1)
    history.set_leaf(conversation)
    assert conversation.turns == [first, kept] and conversation.siblings(1) == (2, 4)
    history.close()
    reopened = HistoryStore(tmp_path / "history.sqlite3").conversations()[0]
    assert [t.answer for t in reopened.turns] == ["4", "It is 9."]
    assert [t.answer for t in reopened.children(reopened.turns[0])] == ["8", "It is 8.", "It is 9.", "It is 10."]


def test_two_to_four_variants() -> None:
    """Bug caught: a Compare of one variant (nothing to compare) or of more than the dialog has columns."""
    conversation = Conversation(turns=[Turn(user="q")])
    for count in (1, 5):
        with pytest.raises(ValueError):
            Comparison(conversation, 0, [Variant.think_off()] * count)
    assert len(conversation.tree) == 1, "a refused Compare adds no turns"
