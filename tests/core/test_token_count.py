"""Tokens counted in the window with the model's own tokenizer, and the context check before a send."""

from __future__ import annotations

from pathlib import Path

from app.core.models.token_count import ContextFit, counter_for
from tests.conftest import require_embedded_model


def test_the_models_own_tokenizer_counts_and_a_missing_one_estimates(tmp_path: Path) -> None:
    """Bugs caught: counting characters as tokens (3–4× off), or claiming an exact count without the
    model's tokenizer."""
    exact = counter_for(require_embedded_model())
    text = "Integrate x e^x from 0 to 1 by parts. " * 20
    from transformers import AutoTokenizer  # the reference: the tokenizer transformers loads for the model

    reference = AutoTokenizer.from_pretrained(str(require_embedded_model()))
    assert exact.exact and exact.count(text) == len(reference(text, add_special_tokens=False)["input_ids"])
    estimate = counter_for(tmp_path)
    assert not estimate.exact and 0.5 < estimate.count(text) / exact.count(text) < 2
    assert not counter_for(None).exact


def test_the_check_names_how_far_over_and_the_fixes() -> None:
    """Bug caught: a question with a long file sent anyway, then cut by the engine with a vague error."""
    fit = ContextFit(context_tokens=2048, used_tokens=1900, reply_tokens=1024)
    assert not fit.fits and fit.over_by == 876
    message = fit.refusal(files_tokens=1700)
    assert "1,700" in message and "876 too many" in message and "2,048" in message and "context length" in message
    assert ContextFit(4096, 1900, 1024).fits


def test_a_text_counted_again_is_not_encoded_again(monkeypatch) -> None:
    """Bug caught: every send and thread render counted each earlier turn's texts again with the tokenizer
    (the keep-thinking switches, the context fit): a send at 60 turns took 80 ms instead of 3."""
    from app.core.models import token_count

    tokenizer_file = require_embedded_model() / "tokenizer.json"
    tokenizer = token_count._tokenizer(tokenizer_file)
    encoded: list[str] = []

    class Counting:
        def encode(self, text: str, add_special_tokens: bool = False):  # type: ignore[no-untyped-def]
            encoded.append(text)
            return tokenizer.encode(text, add_special_tokens=add_special_tokens)

    monkeypatch.setattr(token_count, "_tokenizer", lambda path: Counting())
    token_count._exact_count.cache_clear()
    counter = token_count.TokenCounter(tokenizer_file)
    text = "An answer of some length, counted on every send. " * 20
    assert counter.count(text) == counter.count(text) == len(tokenizer.encode(text, add_special_tokens=False).ids)
    assert encoded == [text]
    token_count._exact_count.cache_clear()
