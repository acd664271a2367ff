"""Trimming a long conversation, on the embedded model's real tokenizer and chat template (no engine)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.engine.errors import EngineFailure, FailureKind
from app.engine.reply import trimming
from tests.conftest import require_embedded_model

# DeepSeek-R1's habit: earlier thinking is cut out of assistant turns, so a turn's tokens are not
# simply its content's. The fast search must still land on the reference's cut.
THINK_STRIPPING_TEMPLATE = (
    "{% for m in messages %}{% set c = m['content'] %}"
    "{% if m['role'] == 'assistant' and '</think>' in c %}{% set c = c.split('</think>')[-1] %}{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{{ c }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(require_embedded_model()))


class CountingTokenizer:
    """The real tokenizer, counting the characters it is asked to tokenise."""

    def __init__(self, inner: Any, chat_template: str | None = None) -> None:
        self.inner = inner
        self.chat_template = chat_template
        self.chars = 0

    def apply_chat_template(self, conversation: list[Any], **kwargs: Any) -> Any:
        if self.chat_template is not None:
            kwargs["chat_template"] = self.chat_template
        return self.inner.apply_chat_template(conversation, **kwargs)

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        self.chars += len(text)
        return self.inner.encode(text, **kwargs)

    def __call__(self, texts: list[str], **kwargs: Any) -> Any:
        self.chars += sum(len(text) for text in texts)
        return self.inner(texts, **kwargs)


WORDS = ["the", "sky", "is", "blue", "because", "\n", "\n\n", " ", "Rayleigh", "scattering", "42", "<think>",
         "</think>", "é", "日本", "🙂", "  indented", "-", "*"]


def history(rng: random.Random, turns: int, words: int, system: bool) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "Be brief."}] if system else []
    for index in range(turns):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, words)))
        messages.append({"role": "user" if index % 2 == 0 else "assistant", "content": text})
    return messages


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), turns=st.integers(1, 60), words=st.integers(0, 120), system=st.booleans(),
       budget=st.integers(20, 1500), opened_think=st.booleans(), stripping=st.booleans())
def test_the_fast_cut_is_the_reference_cut(tokenizer: Any, seed: int, turns: int, words: int, system: bool,
                                           budget: int, opened_think: bool, stripping: bool) -> None:
    template = THINK_STRIPPING_TEMPLATE if stripping else None
    messages = history(random.Random(seed), turns, words, system)
    expected = trimming.fit_by_dropping_one_at_a_time(CountingTokenizer(tokenizer, template), messages,
                                                      budget=budget, opened_think=opened_think)
    assert trimming.fit_history(CountingTokenizer(tokenizer, template), messages, budget=budget,
                                opened_think=opened_think) == expected


def test_the_cost_follows_the_window_not_the_history(tokenizer: Any) -> None:
    """What is tokenised stays the same when the history grows tenfold: the old trimming
    re-tokenised everything once per dropped turn (27 s for 200 messages of 4.5 KB)."""
    rng = random.Random(7)
    tokenised = []
    for turns in (1_000, 10_000):
        messages = history(rng, turns, 60, system=True)
        counting = CountingTokenizer(tokenizer)
        ids, dropped = trimming.fit_history(counting, messages, budget=3_000, opened_think=False)
        assert len(ids) <= 3_000 and dropped > turns - 200
        kept_chars = sum(len(m["content"]) for m in messages[1 + dropped:])
        assert counting.chars < 12 * kept_chars + 50_000, "tokenised far more than the window"
        tokenised.append(counting.chars)
    assert tokenised[1] < 2 * tokenised[0]


def test_thirty_thousand_tiny_messages_are_trimmed_exactly(tokenizer: Any) -> None:
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": str(i % 10)} for i in range(30_000)]
    counting = CountingTokenizer(tokenizer)
    ids, dropped = trimming.fit_history(counting, messages, budget=4_096 - 512, opened_think=False)
    assert len(ids) <= 4_096 - 512
    one_more = trimming.prompt_ids(tokenizer, messages[dropped - 1:], opened_think=False)
    assert len(one_more) > 4_096 - 512, "one more turn would not fit: the cut is the smallest"
    assert counting.chars < 200_000


def test_a_newest_turn_longer_than_the_context_is_named(tokenizer: Any) -> None:
    messages = [{"role": "user", "content": "old"}, {"role": "assistant", "content": "reply"},
                {"role": "user", "content": "word " * 5_000}]
    with pytest.raises(EngineFailure) as caught:
        trimming.fit_prompt(tokenizer, messages, limit=2_048, reserve=256, opened_think=False)
    assert caught.value.kind is FailureKind.PROMPT_TOO_LONG
    assert "the context holds 2,048" in caught.value.message


def test_text_the_tokenizer_refuses_is_a_typed_failure(tokenizer: Any) -> None:
    """A lone surrogate makes the tokenizer raise TypeError; it arrives as a failure the caller can show."""
    with pytest.raises(EngineFailure) as caught:
        trimming.fit_prompt(tokenizer, [{"role": "user", "content": "x\ud800"}], limit=2_048, reserve=256,
                            opened_think=False)
    assert caught.value.kind is FailureKind.BAD_MESSAGES
