"""Fast tests of decisions that only the real-engine tests reached before: a local reply's vLLM requests
(app/engine/local/local_reply.py) on a fake AsyncLLM, the family table (app/core/models/model_families.py), and the
request body RemoteEngine sends (real HTTP to a scripted server). Each test names the bug it catches.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from app.core.models.model_families import (
    GREEDY_THINKING_WARNING,
    PLAIN,
    model_family,
    sampling_warning,
    with_card_sampling,
)
from app.core.settings.settings import EndpointProfile, EngineConfig, LoopGuardConfig, SamplingConfig, changed
from app.engine.events import EngineEvent
from app.engine.local.local_reply import BACKSTOP_COPIES, LocalReply, ReplyRequests, finish_reason
from app.engine.reply.reasoning import ThinkTagSplitter
from app.engine.reply.stream import ReplyStream

# ---- a local reply's requests, on a fake AsyncLLM ---------------------------------------------------


@dataclass
class Completion:
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    stop_reason: Any = None


@dataclass
class Output:
    outputs: list[Completion]
    finished: bool = False


@dataclass
class FakeAsyncLLM:
    """Stands in for vLLM's AsyncLLM: each ``generate`` plays the next script of (text, ids) deltas and
    records the prompt ids and SamplingParams it was given."""

    scripts: list[list[tuple[str, list[int]]]]
    finish: str = "stop"
    calls: list[tuple[list[int], Any, str]] = field(default_factory=list)

    async def generate(self, prompt: list[int], params: Any, request_id: str) -> AsyncIterator[Output]:
        self.calls.append((list(prompt), params, request_id))
        deltas = self.scripts.pop(0) if self.scripts else []
        for index, (text, ids) in enumerate(deltas):
            last = index == len(deltas) - 1
            yield Output([Completion(text, ids, self.finish if last else None)], finished=last)


def reply_for(sampling: SamplingConfig, budget: int, *, prompt: list[int] | None = None, max_model_len: int = 2048,
              ignore_eos: bool = False) -> LocalReply:
    stream = ReplyStream("r", prompt_tokens=len(prompt or [1, 2, 3]), max_model_len=max_model_len, sampling=sampling)
    return LocalReply(stream, sampling, list(prompt or [1, 2, 3]), budget, ignore_eos)


def run_think(engine: FakeAsyncLLM, reply: LocalReply, *, aborted: set[str] = frozenset(),
              answer_now: set[str] = frozenset(), decode: Any = None) -> list[EngineEvent]:
    requests = ReplyRequests(engine, lambda ids: ids, {}, set(aborted), set(answer_now), decode)
    splitter = ThinkTagSplitter(prompt_opened_think=True)

    async def collect() -> list[EngineEvent]:
        return [event async for event in requests.think_phase(reply, splitter)]

    # On a thread of its own: the suite's qasync loop may be marked running on this one.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, collect()).result(60)


QUIET = SamplingConfig(think_budget=8, max_tokens=4, loop_guard=LoopGuardConfig(enabled=False))


def test_the_think_request_asks_for_budget_plus_answer_and_no_more_than_the_context() -> None:
    """Bugs caught: max_tokens of the think request not budget + max_tokens (a reply cut before it answers,
    or one that runs past its limit), or not capped by the room left in the context (vLLM refuses it)."""
    engine = FakeAsyncLLM([[("a", [10])]])
    run_think(engine, reply_for(QUIET, budget=8))
    prompt, params, vllm_id = engine.calls[0]
    assert prompt == [1, 2, 3] and vllm_id == "r-think"
    assert params.max_tokens == 8 + 4
    small = FakeAsyncLLM([[("a", [10])]])
    run_think(small, reply_for(QUIET, budget=8, prompt=list(range(2040)), max_model_len=2048))
    assert small.calls[0][1].max_tokens == 8, "the context's room (2048 - 2040), not 12"


def test_thinking_past_the_budget_is_cut_and_the_rest_of_the_request_is_not_read() -> None:
    """Bug caught: the think budget not enforced (a reply that thinks forever), or enforced on the answer."""
    deltas = [(f"t{i} ", [100 + i]) for i in range(20)]
    engine = FakeAsyncLLM([deltas])
    reply = reply_for(QUIET, budget=5)
    run_think(engine, reply)
    assert reply.forced_close
    assert len(reply.generated_ids) == 5 and reply.stream.texts.thinking_text.strip() == "t0 t1 t2 t3 t4"


def test_a_speculative_burst_across_the_budget_is_trimmed_to_it() -> None:
    """Bug caught: with speculative decoding on (n-gram, the CPU engine's default) vLLM delivers up to five
    tokens a step, and a reply thought up to four tokens past its budget: the tokens past it must be dropped,
    their text too, before the thinking is closed."""
    bursts = [(" ".join(f"t{i}" for i in range(start, start + 4)) + " ", list(range(100 + start, 104 + start)))
              for start in range(0, 20, 4)]
    engine = FakeAsyncLLM([bursts])
    reply = reply_for(QUIET, budget=6)
    run_think(engine, reply, decode=lambda ids: "".join(f"t{i - 100} " for i in ids))
    assert reply.forced_close
    assert reply.generated_ids == [100, 101, 102, 103, 104, 105]
    assert reply.stream.texts.thinking_text.strip() == "t0 t1 t2 t3 t4 t5"
    assert reply.stream.rates["thinking"].tokens == 6


def test_a_reply_that_answers_within_the_budget_is_not_cut() -> None:
    """Bug caught: forced_close set after </think> (the answer phase would be asked again)."""
    engine = FakeAsyncLLM([[("plan", [5]), ("</think>", [6]), ("Yes", [7]), (".", [8])]])
    reply = reply_for(QUIET, budget=5)
    run_think(engine, reply)
    assert not reply.forced_close and reply.finish == "stop"
    assert (reply.stream.texts.thinking_text, reply.stream.texts.answer_text) == ("plan", "Yes.")


def test_answer_now_and_abort_end_the_think_request() -> None:
    """Bugs caught: Answer now ignored while thinking; an abort not reported as one (the UI would call a
    stopped reply finished)."""
    hurried = reply_for(QUIET, budget=1000)
    run_think(FakeAsyncLLM([[("a ", [1]), ("b ", [2]), ("c ", [3])]]), hurried, answer_now={"r"})
    assert hurried.forced_close and hurried.generated_ids == [1]
    stopped = reply_for(QUIET, budget=1000)
    run_think(FakeAsyncLLM([[("a ", [1]), ("b ", [2])]]), stopped, aborted={"r"})
    assert stopped.finish == "abort" and stopped.generated_ids == [1]


def run_reply(engine: FakeAsyncLLM, reply: LocalReply, resumed_answer: list[int] | None = None) -> list[EngineEvent]:
    """ReplyRequests.run (both phases) with ``[99]`` as the forced ``</think>``."""
    requests = ReplyRequests(engine, lambda ids: ids, {}, set(), set())
    splitter = ThinkTagSplitter(prompt_opened_think=True)

    async def collect() -> list[EngineEvent]:
        return [event async for event in requests.run(reply, splitter, [99], resumed_answer)]

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, collect()).result(60)


def test_thinking_cut_at_the_budget_goes_on_in_an_answer_request_after_a_forced_close() -> None:
    """Bugs caught: no answer phase after a cut (a reply of thinking only), or its prompt without the kept
    thinking or the forced </think> (the model would think again, or lose what it thought)."""
    engine = FakeAsyncLLM([[(f"t{i} ", [100 + i]) for i in range(9)], [("Yes", [7])]])
    reply = reply_for(QUIET, budget=5)
    run_reply(engine, reply)
    assert [vllm_id for _, _, vllm_id in engine.calls] == ["r-think", "r-answer"]
    assert engine.calls[1][0] == [1, 2, 3, 100, 101, 102, 103, 104, 99]
    assert reply.stream.texts.answer_text == "Yes"


def test_a_reply_that_closed_its_thinking_itself_makes_no_second_request() -> None:
    """Bug caught: an answer phase after the model already answered (a second answer appended)."""
    engine = FakeAsyncLLM([[("plan", [5]), ("</think>", [6]), ("Yes", [7])], [("again", [8])]])
    run_reply(engine, reply_for(QUIET, budget=5))
    assert [vllm_id for _, _, vllm_id in engine.calls] == ["r-think"]


def test_no_answer_request_when_the_thinking_leaves_no_room_or_cannot_conclude() -> None:
    """Bugs caught: an answer request vLLM would refuse for a full context (the reply must end as
    "length"), or one after thinking that is not ours to close (a plain reply cut by its budget)."""
    full = FakeAsyncLLM([[(f"t{i} ", [100 + i]) for i in range(9)], [("Yes", [7])]])
    crowded = reply_for(QUIET, budget=5, prompt=list(range(2041)), max_model_len=2048)  # 2041 + 5 + 1: room 1
    run_reply(full, crowded)
    assert [vllm_id for _, _, vllm_id in full.calls] == ["r-think"] and crowded.finish == "length"
    plain = FakeAsyncLLM([[(f"t{i} ", [100 + i]) for i in range(9)], [("Yes", [7])]])
    unclosable = reply_for(QUIET, budget=5)
    unclosable.can_conclude = False
    run_reply(plain, unclosable)
    assert [vllm_id for _, _, vllm_id in plain.calls] == ["r-think"]


def test_a_reply_resumed_in_its_answer_goes_straight_to_the_answer_request() -> None:
    """Bug caught: a resumed answer thinking again, or its prompt without the kept thinking, the forced
    </think> or the kept answer (the model would repeat itself)."""
    engine = FakeAsyncLLM([[("more", [8])]])
    reply = reply_for(QUIET, budget=5)
    reply.generated_ids = [50, 51]
    run_reply(engine, reply, resumed_answer=[60])
    assert [(prompt, vllm_id) for prompt, _, vllm_id in engine.calls] == [([1, 2, 3, 50, 51, 99, 60], "r-answer")]


def test_finish_reasons_are_named_from_vllms() -> None:
    """Bug caught: vLLM's repetition backstop or a length stop shown as a normal stop."""
    assert finish_reason(Completion("", [], "length")) == "length"
    assert finish_reason(Completion("", [], "stop", "repetition_detected")) == "loop"
    assert finish_reason(Completion("", [], "abort")) == "abort"
    assert finish_reason(Completion("", [], "stop")) == "stop"


def test_vllms_backstop_is_set_only_where_the_guard_does_not_act_and_a_resample_runs_hotter() -> None:
    """Bugs caught: vLLM's repetition check left on while the guard acts (it would end a loop the guard was
    about to conclude), or off while the guard only warns (an endless loop); a resample with the same
    temperature (it would loop again the same way)."""
    acting = reply_for(SamplingConfig(temperature=0.3), budget=10)
    assert ReplyRequests.params(acting, 10, answer=True).repetition_detection is None
    warning = reply_for(SamplingConfig(loop_guard=LoopGuardConfig(action="warn")), budget=10)
    backstop = ReplyRequests.params(warning, 10, answer=True).repetition_detection
    assert backstop is not None and backstop.min_count == BACKSTOP_COPIES
    acting.stream.resamples = 1
    hotter = ReplyRequests.params(acting, 10, answer=True)
    assert hotter.temperature == max(acting.sampling.loop_guard.resample_temperature, 0.3 + 0.2)
    assert hotter.presence_penalty == 1.0


def test_sampling_and_ignore_eos_reach_vllm() -> None:
    """Bug caught: the user's sampling (or a benchmark's ignore_eos) dropped on the way to SamplingParams."""
    sampling = SamplingConfig(temperature=0.7, top_p=0.9, top_k=20, repetition_penalty=1.1)
    params = ReplyRequests.params(reply_for(sampling, budget=10, ignore_eos=True), 33, answer=True)
    assert (params.temperature, params.top_p, params.top_k, params.repetition_penalty) == (0.7, 0.9, 20, 1.1)
    assert params.ignore_eos and params.max_tokens == 33


# ---- the family table --------------------------------------------------------------------------------


@pytest.mark.parametrize("name, model_type, family, parser, thinking", [
    ("Qwen/Qwen3-4B-Instruct-2507", "qwen3", "Qwen3 Instruct-2507", None, "plain"),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_moe", "Qwen3-Coder", None, "plain"),
    ("deepseek-ai/DeepSeek-R1-0528-Qwen3-8B", "qwen3", "DeepSeek-R1", "deepseek_r1", "always"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "qwen2", "DeepSeek-R1 distill", "deepseek_r1", "always"),
    ("Qwen/Qwen3-30B-A3B-Thinking-2507", "qwen3_moe", "Qwen3 Thinking-2507", "qwen3", "always"),
    ("Qwen/Qwen3-0.6B", "qwen3", "Qwen3", "qwen3", "hybrid"),
    ("/models/my-finetune", "qwen3", "Qwen3", "qwen3", "hybrid"),  # a folder: config.json's model_type decides
    ("zai-org/GLM-4.6", "glm4_moe", "GLM-4.5+", "deepseek_r1", "hybrid"),
    ("moonshotai/Kimi-K2-Thinking", "kimi_k2", "Kimi-K2 Thinking", "deepseek_r1", "always"),
    ("HuggingFaceTB/SmolLM2-135M-Instruct", "llama", "plain chat model", None, "plain"),
])
def test_the_first_matching_family_wins(name: str, model_type: str, family: str, parser: str | None,
                                        thinking: str) -> None:
    """Bug caught: a reordered table (plain "qwen3" first would give Instruct-2507 a Think switch and a parser
    it hasn't, and the R1 distill of Qwen3 Qwen3's hybrid template)."""
    found = model_family(name, model_type)
    assert (found.name, found.parser, found.thinking) == (family, parser, thinking)


def test_card_sampling_follows_the_switch_and_plain_models_keep_the_users() -> None:
    """Bugs caught: the thinking card used with thinking off (or the reverse); a plain model's settings
    overwritten by nothing; the greedy-thinking warning missing, or shown for a reply that can't think."""
    qwen3 = model_family("Qwen/Qwen3-0.6B")
    on = with_card_sampling(SamplingConfig(temperature=1.0, thinking=True), qwen3)
    off = with_card_sampling(SamplingConfig(temperature=1.0, thinking=False), qwen3)
    assert (on.temperature, on.top_p, on.top_k) == (0.6, 0.95, 20)
    assert (off.temperature, off.top_p, off.top_k) == (0.7, 0.8, 20)
    mine = SamplingConfig(temperature=0.42)
    assert with_card_sampling(mine, PLAIN) == mine
    greedy = SamplingConfig(temperature=0.0, thinking=True)
    assert sampling_warning(greedy, qwen3) == GREEDY_THINKING_WARNING
    assert sampling_warning(changed(greedy, thinking=False), qwen3) is None
    assert sampling_warning(changed(greedy, think_budget=0), qwen3) is None
    r1 = model_family("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    assert r1.thinks(False) and not qwen3.thinks(False) and not PLAIN.thinks(True)
    assert not r1.system_prompt and qwen3.system_prompt


# ---- RemoteEngine's request body, over real HTTP -----------------------------------------------------


@pytest.fixture
def sse() -> Iterator[Any]:
    from tests.support.sse_server import scripted_sse_server

    with scripted_sse_server() as server:
        yield server


@pytest.mark.parametrize("model, switch_sent", [("Qwen/Qwen3-8B", True), ("meta-llama/Llama-3.1-8B", False),
                                                ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", False)])
def test_the_remote_request_body(sse: Any, model: str, switch_sent: bool) -> None:
    """Bugs caught: max_tokens without the think budget (a remote reply cut while thinking); the user's
    temperature or top-p not sent; the Think switch not sent to a hybrid family (vLLM's server would think
    anyway), or sent to one whose template doesn't know it; no usage asked for (no prompt-token gauge)."""
    from app.engine.remote.remote import RemoteEngine

    engine = RemoteEngine(EndpointProfile(name="box", base_url=sse.base_url, model=model), "sk-none")
    try:
        engine.loop_thread.submit(engine.start(EngineConfig())).result(30)
        sse.scripts["hi"] = [{"content": "hello"}]
        sampling = SamplingConfig(temperature=0.35, top_p=0.85, think_budget=100, max_tokens=20, thinking=False)
        events: list[EngineEvent] = []
        engine.loop_thread.submit(engine.stream_to(events.append, [{"role": "user", "content": "hi"}],
                                                   sampling, "r")).result(30)
    finally:
        engine.close()
    (body,) = sse.requests
    assert body["model"] == model and body["messages"] == [{"role": "user", "content": "hi"}]
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.35, 0.85, 120)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert ("chat_template_kwargs" in body) == switch_sent
    if switch_sent:
        assert body["chat_template_kwargs"] == {"enable_thinking": False}
