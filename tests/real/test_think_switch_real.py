"""The Think switch on the real engine: the embedded model behind a Qwen3-style chat template (Qwen3's
generation-prompt logic, enable_thinking included), in a folder named like a Qwen3 model, so Nalar
treats it as a hybrid model. The switch changes the prompt the template renders, and the split."""

from __future__ import annotations

import pytest

from app.core.settings.settings import SamplingConfig
from app.engine.events import Finished
from app.engine.local.host import EngineHost

pytestmark = pytest.mark.real_engine

QUESTION = [{"role": "user", "content": "What is 12 times 7?"}]


@pytest.fixture
def hybrid_host(hybrid_engine: EngineHost) -> EngineHost:
    """The session's hybrid engine (tests/conftest.py), shared with tests/real/test_pause_edit_real.py."""
    return hybrid_engine


def reply(host: EngineHost, thinking: bool) -> Finished:
    sampling = SamplingConfig(temperature=0.0, think_budget=16, max_tokens=12, thinking=thinking)
    finished = host.loop_thread.submit(
        host.stream_to(lambda event: None, QUESTION, sampling, f"think-{thinking}", ignore_eos=True)).result(300)
    assert finished is not None and finished.reason in ("stop", "length")
    return finished


def prompt_tail(host: EngineHost, thinking: bool) -> str:
    from transformers import AutoTokenizer

    assert host.config is not None
    ids, _ = host.fit_prompt(QUESTION, 64, opened_think=thinking)
    return str(AutoTokenizer.from_pretrained(host.config.model).decode(ids[-24:]))


def test_the_switch_changes_the_prompt(hybrid_host: EngineHost) -> None:
    assert prompt_tail(hybrid_host, thinking=True).endswith("<|im_start|>assistant\n<think>\n")
    assert prompt_tail(hybrid_host, thinking=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_the_switch_changes_the_split(hybrid_host: EngineHost) -> None:
    on = reply(hybrid_host, thinking=True)
    assert on.thinking_text.strip() and on.answer_text.strip(), "thinking on: a thought, then the forced answer"
    off = reply(hybrid_host, thinking=False)
    assert off.thinking_text == "" and off.answer_text.strip(), "thinking off: the whole reply is the answer"
