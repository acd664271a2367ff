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
        def encode_batch(self, texts: list[str], add_special_tokens: bool = False):  # type: ignore[no-untyped-def]
            encoded.extend(texts)
            return tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)

    monkeypatch.setattr(token_count, "_tokenizer", lambda path: Counting())
    token_count.forget_counts()
    counter = token_count.TokenCounter(tokenizer_file)
    text = "An answer of some length, counted on every send. " * 20
    assert counter.count(text) == counter.count(text) == len(tokenizer.encode(text, add_special_tokens=False).ids)
    assert counter.count_all([text, "new", text]) == [counter.count(text), 1, counter.count(text)]
    assert encoded == [text, "new"]
    token_count.forget_counts()


def test_the_gui_thread_may_count_only_short_texts_and_only_once_the_tokenizer_is_read() -> None:
    """Bugs caught: the first count read tokenizer.json on the GUI thread (184 ms in ``nalar bench hostile``), and a
    1 MB attachment or a reopened chat's long answer was encoded there (0.8-1 s); ``cheap`` is what the window asks
    before counting on its own thread."""
    from app.core.models import token_count

    token_count.forget_counts()
    counter = counter_for(require_embedded_model())
    assert not counter.cheap(["hi"]), "the tokenizer is not read yet: reading it is a worker's"
    assert counter.known("hi") is None
    counter.count("warm")  # as a worker reads it
    assert counter.cheap(["hi"] * token_count.SYNC_TEXTS)
    assert not counter.cheap(["x" * (token_count.SYNC_CHARS + 1)]), "a long text is a worker's"
    assert not counter.cheap([f"turn {n}" for n in range(token_count.SYNC_TEXTS + 1)]), "so are many short ones"
    long_text = "$5 " * 100_000
    count = counter.count(long_text)
    assert counter.known(long_text) == count and counter.cheap([long_text]), "counted once, it costs nothing"
    assert counter_for(None).cheap([long_text]) and counter_for(None).known(long_text) is not None
    token_count.forget_counts()
