"""`nalar bench spec`'s arithmetic: divergence and its margins, medians and ratios to no speculation."""

from __future__ import annotations

import pytest

from app.commands.speculation.spec_report import (
    NEAR_TIE_NATS,
    PhaseRun,
    first_divergence,
    report_text,
    summarise,
    top2_margin,
)


def decode(ids: list[int]) -> str:
    return "".join(f"<{i}>" for i in ids)


def test_the_first_divergence_is_found_with_both_runs_margins() -> None:
    """Bug caught: the margin read one token off (at the token after the split, where the runs already
    follow different texts), or from one run only, so a real bug passes as a near-tie."""
    base, other = [1, 2, 3, 4], [1, 2, 5, 6]
    base_lp = [{1: -0.1, 9: -3.0}, {2: -0.2, 9: -2.0}, {3: -0.60, 5: -0.70}, {4: -0.1, 9: -5.0}]
    other_lp = [{1: -0.1, 9: -3.0}, {2: -0.2, 9: -2.0}, {5: -0.62, 3: -0.66}, {6: -0.1, 9: -5.0}]
    found = first_divergence("ngram", "p", base, other, base_lp, other_lp, decode)
    assert (found.token_index, found.char_index) == (2, len("<1><2>"))
    assert found.margin_none == pytest.approx(0.10) and found.margin_method == pytest.approx(0.04)
    assert found.near_tie
    clear = first_divergence("ngram", "p", base, other, base_lp,
                             [*other_lp[:2], {5: -0.01, 3: -4.0}, other_lp[3]], decode)
    assert clear.margin_method == pytest.approx(3.99) and not clear.near_tie, "a split at a clear margin is a bug"
    same = first_divergence("ngram", "p", base, base, base_lp, base_lp, decode)
    assert same.token_index is None and same.near_tie


def test_top2_margin_needs_two_candidates() -> None:
    assert top2_margin({7: -0.5, 8: -0.5 - NEAR_TIE_NATS}) == pytest.approx(NEAR_TIE_NATS)
    assert top2_margin({7: -0.5}) is None


def test_medians_ratios_and_acceptance_per_method() -> None:
    """Bug caught: the ratio taken against the wrong method, or the acceptance averaged per reply instead of
    over all drafted tokens (a short reply then weighs as much as a long one)."""
    runs = [PhaseRun("off", "a", 101, 2.0, 51, 1.0), PhaseRun("off", "b", 101, 4.0, 51, 1.0),
            PhaseRun("ngram", "a", 101, 1.0, 51, 1.0, drafts=10, draft_tokens=40, accepted_tokens=30),
            PhaseRun("ngram", "b", 101, 2.0, 51, 2.0, drafts=30, draft_tokens=120, accepted_tokens=10)]
    off, ngram = summarise(runs)
    assert off.thinking_tok_s == pytest.approx(37.5) and off.thinking_ratio == pytest.approx(1.0)
    assert ngram.thinking_tok_s == pytest.approx(75.0) and ngram.thinking_ratio == pytest.approx(2.0)
    assert ngram.answer_ratio == pytest.approx(0.75)
    assert ngram.acceptance_rate == pytest.approx(40 / 160) and ngram.mean_accepted_length == pytest.approx(2.0)
    assert off.acceptance_rate is None
    split = first_divergence("ngram", "a", [1, 2], [1, 3], [{1: 0.0, 9: -1.0}, {2: -0.5, 3: -0.6}],
                             [{1: 0.0, 9: -1.0}, {3: -0.5, 2: -0.55}], decode)
    table = report_text([off, ngram], [split])
    assert "ngram" in table and "near-tie" in table and " 3 " in table  # parts at token 1, char 3
