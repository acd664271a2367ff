"""Going on from a given text on a remote profile (app.engine.remote.continuation): the decisions, fast.

The real path (vLLM's /tokenize, /detokenize and /v1/completions on a real `vllm serve`) is
tests/real/test_remote_real.py; here each decision it rests on is checked without an engine, and a
server without /tokenize is a real HTTP server on 127.0.0.1.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.core.models.model_families import model_family
from app.core.settings.settings import EndpointProfile, EngineConfig, RequestControls, SamplingConfig
from app.engine.remote.continuation import CONTROL_TOKENS, continuation_text, family_refusal, server_root
from app.engine.remote.remote import RemoteEngine, chunk_parts, completion_request, take_usage
from app.engine.reply.stream import ReplyStream
from app.engine.requests import Resume
from tests.support.sse_server import scripted_sse_server


@pytest.mark.parametrize(("base_url", "root"), [
    ("http://box:8000/v1", "http://box:8000"), ("http://box:8000/v1/", "http://box:8000"),
    ("https://proxy.example/llm", "https://proxy.example/llm")])
def test_tokenize_is_asked_at_the_servers_root(base_url: str, root: str) -> None:
    """Bug caught: /tokenize asked under /v1, where vLLM serves none (it is at the root), so no server resumed."""
    assert server_root(base_url) == root


def test_the_think_block_is_opened_unless_the_template_did() -> None:
    """Bugs caught: a second <think> after a generation prompt that opened one (Qwen3 thinking, the R1
    distills), or none where the template leaves it to the model, so the edit landed outside the block."""
    paused = Resume("thinking", "Step 1: 300 cm.\nHint: check the units.")
    assert continuation_text(paused, prompt_opened=False, thinking_on=True) == (
        "<think>\nStep 1: 300 cm.\nHint: check the units.", "open")
    assert continuation_text(paused, prompt_opened=True, thinking_on=True) == (
        "Step 1: 300 cm.\nHint: check the units.", "open")


def test_an_answer_goes_on_after_the_closed_thinking() -> None:
    """Bugs caught: Continue after max tokens sending the answer without the thinking before it (the model
    reads its answer as thinking), or with the block left open; a chat with Think off getting a think block."""
    cut = Resume("answer", "300 cm is", "The answer: 3")
    assert continuation_text(cut, prompt_opened=True, thinking_on=True) == (
        "300 cm is\n</think>\n\nThe answer: 3", "closed")
    assert continuation_text(cut, prompt_opened=False, thinking_on=False) == ("The answer: 3", "closed")


@pytest.mark.parametrize(("model", "refused"), [
    ("mistralai/Magistral-Small-2509", True), ("openai/gpt-oss-20b", True),
    ("Qwen/Qwen3-8B", False), ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", False)])
def test_a_family_whose_thinking_text_cant_spell_is_refused_with_the_reason(model: str, refused: bool) -> None:
    """Bug caught: Magistral's [THINK] control tokens or Harmony's channels written back as text, which the
    tokenizer makes into ordinary words, so the model reads its own thinking as a user's text."""
    reason = family_refusal(model_family(model), model)
    assert (reason == CONTROL_TOKENS.format(model=model)) is refused and (reason == "") is not refused


def test_the_continuation_asks_only_for_the_tokens_the_kept_text_left() -> None:
    """Bugs caught: the resumed request given the whole budget again (a paused reply running past its budget
    by what it had written), or a spent budget sent as 0 or less (which vLLM refuses)."""
    sampling = SamplingConfig(think_budget=200, max_tokens=16, temperature=0.0,
                              request=RequestControls(stop=("END",), seed=7))
    request = completion_request("smol-qwq", [1, 2, 3], sampling, kept_tokens=50, ignore_eos=True)
    assert request["prompt"] == [1, 2, 3] and request["max_tokens"] == 166 and request["stream"]
    assert request["stop"] == ["END"] and request["seed"] == 7 and request["extra_body"] == {"ignore_eos": True}
    assert completion_request("m", [1], sampling, kept_tokens=400)["max_tokens"] == 1
    assert "extra_body" not in completion_request("m", [1], sampling, kept_tokens=0), "ignore_eos only when asked"


def test_a_completions_chunk_is_text_and_a_chat_chunk_keeps_its_fields() -> None:
    """Bug caught: a completions choice read as a chat delta (AttributeError on .delta, or its text lost)."""
    completion = SimpleNamespace(text="so 3 m", finish_reason=None)
    assert chunk_parts(completion) == ("so 3 m", "", (), None)
    chat = SimpleNamespace(delta=SimpleNamespace(content="3 m", reasoning_content=None, reasoning="units",
                                                 tool_calls=None, model_extra={}), finish_reason="stop")
    assert chunk_parts(chat) == ("3 m", "units", (), "stop")


def test_the_servers_cached_token_count_is_the_replys_prefix_cache_figure() -> None:
    """Bug caught: vLLM's prompt_tokens_details.cached_tokens ignored, so a remote resume showed no share."""
    stream = ReplyStream("r", sampling=SamplingConfig())
    take_usage(stream, SimpleNamespace(prompt_tokens=1400, prompt_tokens_details=SimpleNamespace(cached_tokens=1280)))
    assert stream.prompt_tokens == 1400 and stream.prefix_cache == (1280, 1400)
    bare = ReplyStream("r", sampling=SamplingConfig())
    take_usage(bare, SimpleNamespace(prompt_tokens=90, prompt_tokens_details=None))
    assert bare.prompt_tokens == 90 and bare.prefix_cache == (0, 0), "no figure is not a 0 % share"


def test_a_server_without_tokenize_cant_resume_and_says_where() -> None:
    """Bug caught: Pause offered for a server with only the chat endpoint (OpenAI, Ollama…), whose Resume
    would start a new reply; or the button off with no reason naming the server."""
    with scripted_sse_server() as server:
        engine = RemoteEngine(EndpointProfile(name="chat-only", base_url=server.base_url, model="Qwen/Qwen3-8B"),
                              "sk-unused", first_token_timeout_s=10)
        try:
            engine.loop_thread.submit(engine.start(EngineConfig())).result(30)
            assert not engine.can_resume
            assert server.base_url in engine.resume_refusal and "/tokenize" in engine.resume_refusal
        finally:
            engine.close()
