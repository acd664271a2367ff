"""The Think switch on the real engine: the embedded model behind a Qwen3-style chat template (Qwen3's
generation-prompt logic, enable_thinking included), in a folder named like a Qwen3 model, so Nalar
treats it as a hybrid model. The switch changes the prompt the template renders, and the split."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.core.models.model_families import model_family
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.events import Finished
from app.engine.local.host import EngineHost
from tests.conftest import child_pids, require_embedded_model, vllm_processes

pytestmark = pytest.mark.real_engine

# Qwen3's own template, cut to the parts that decide the generation prompt.
QWEN3_STYLE_TEMPLATE = """{%- for message in messages %}
    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""
QUESTION = [{"role": "user", "content": "What is 12 times 7?"}]


@pytest.fixture(scope="module")
def hybrid_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineHost]:
    source = require_embedded_model()
    folder = tmp_path_factory.mktemp("models") / "Qwen3-style-SmolLM2-135M"
    folder.mkdir()
    for item in source.iterdir():
        if item.name != "chat_template.jinja":
            (folder / item.name).symlink_to(item)
    (folder / "chat_template.jinja").write_text(QWEN3_STYLE_TEMPLATE, encoding="utf-8")
    assert model_family(folder.name, "llama").thinking == "hybrid"
    before = child_pids()  # the session's shared engine may be running: it is not this fixture's to end
    host = EngineHost()
    try:
        host.loop_thread.submit(host.start(EngineConfig(model=str(folder), max_model_len=2048))).result(600)
        yield host
    finally:
        host.close()
    assert vllm_processes(before) == [], "vLLM processes survived the engine's shutdown"


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
