"""Fast tests of the decisions the real-engine tool tests reach slowly: which vLLM request is
constrained, what a request's controls become, and what a remote server is sent."""

from __future__ import annotations

import json

from app.core.models.model_families import model_family
from app.core.settings.settings import RequestControls, SamplingConfig
from app.engine.local.local_reply import THINK_STOP, LocalReply, ReplyRequests, answer_constraint
from app.engine.remote.answers import StreamedCalls
from app.engine.remote.remote import request_fields
from app.engine.reply.stream import ReplyStream
from app.engine.reply.tool_calls import CALL_MARKERS, ToolOffer, forced_schema

CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}


def _reply(sampling: SamplingConfig, constraint: dict | None, budget: int) -> LocalReply:
    return LocalReply(ReplyStream("r", sampling=sampling), sampling, [1, 2], budget, False, constraint=constraint)


def test_a_forced_call_constrains_the_answer_and_stops_the_thinking_at_its_close() -> None:
    """Bug caught: structured outputs applied to the thinking request (the model can't think) or not to
    the answer (a forced call in prose); or the thinking left free to close </think> and answer freely."""
    sampling = SamplingConfig(request=RequestControls(stop=("END",), seed=3, presence_penalty=0.5,
                                                      frequency_penalty=-0.25))
    constraint = answer_constraint(sampling, forced_schema(ToolOffer((WEATHER,), "required")))
    assert constraint is not None and constraint["json"]["type"] == "array"
    think = ReplyRequests.params(_reply(sampling, constraint, 64), 32, answer=False)
    answer = ReplyRequests.params(_reply(sampling, constraint, 64), 32, answer=True)
    assert think.structured_outputs is None and THINK_STOP in think.stop and "END" in think.stop
    assert answer.structured_outputs is not None and answer.structured_outputs.json == constraint["json"]
    assert (answer.seed, answer.presence_penalty, answer.frequency_penalty, answer.stop) == (3, 0.5, -0.25, ["END"])


def test_response_format_becomes_the_answers_constraint_and_a_forced_call_wins() -> None:
    """Bug caught: response_format ignored, or overriding a forced call's schema (vLLM's server lets the
    tool schema win too)."""
    schema = SamplingConfig(request=RequestControls(json_schema='{"type": "object"}'))
    assert answer_constraint(schema, None) == {"json": '{"type": "object"}'}
    assert answer_constraint(SamplingConfig(request=RequestControls(json_object=True)), None) == {"json_object": True}
    assert answer_constraint(SamplingConfig(), None) is None
    named = forced_schema(ToolOffer((WEATHER,), {"type": "function", "function": {"name": "get_weather"}}))
    assert answer_constraint(schema, named) == {"json": named}


def test_a_remote_server_gets_the_tools_and_controls_and_its_call_deltas_merge() -> None:
    """Bug caught: tools dropped on the way to a remote backend (or its fallback), or a streamed call's
    argument fragments not joined by index."""
    sampling = SamplingConfig(request=RequestControls(stop=("x",), seed=1, json_schema='{"type": "object"}'))
    fields = request_fields(sampling, [WEATHER], None)
    assert fields["tools"] == [WEATHER] and fields["tool_choice"] == "auto" and fields["seed"] == 1
    assert fields["response_format"]["json_schema"]["schema"] == {"type": "object"}
    assert request_fields(SamplingConfig(), None, None) == {}

    class Fn:
        def __init__(self, name, arguments):
            self.name, self.arguments = name, arguments

    class Delta:
        def __init__(self, index, id, name, arguments):
            self.index, self.id, self.function = index, id, Fn(name, arguments)

    calls = StreamedCalls()
    calls.feed("r", [Delta(0, "c1", "get_weather", '{"ci')])
    calls.feed("r", [Delta(0, None, None, 'ty": "Oslo"}')])
    (call,) = calls.calls()
    assert (call.id, call.name, json.loads(call.arguments)) == ("c1", "get_weather", {"city": "Oslo"})


def test_each_family_gets_vllms_parser_for_its_format_and_the_gate_knows_its_markers() -> None:
    """Bug caught: a family given the wrong vLLM tool parser (DSML DeepSeeks on deepseek_v31, Kimi-K2
    Instruct on hermes), or a parser the gate has no markers for: it then holds text at hermes's
    <tool_call> only, so the family's calls stream out as text before the parser sees them."""
    expected = {"Qwen/Qwen3-0.6B": "hermes", "Qwen/Qwen3.5-9B": "qwen3_coder", "zai-org/GLM-4.5": "glm45",
                "zai-org/GLM-4.7": "glm47", "deepseek-ai/DeepSeek-V3.1": "deepseek_v31",
                "deepseek-ai/DeepSeek-V3.2": "deepseek_v32", "deepseek-ai/DeepSeek-V4-Flash": "deepseek_v4",
                "deepseek-ai/DeepSeek-V4.1-Flash": "deepseek_v41", "moonshotai/Kimi-K2-Instruct-0905": "kimi_k2",
                "moonshotai/Kimi-K2.6": "kimi_k2", "moonshotai/Kimi-K3": "kimi_k3", "google/gemma-4-31B-it": "gemma4",
                "meta-llama/Llama-3.3-70B-Instruct": "llama3_json",
                "meta-llama/Llama-4-Scout-17B-16E-Instruct": "llama4_pythonic",
                "/models/SmolLM2-135M-Instruct": "hermes"}
    from vllm.tool_parsers import ToolParserManager

    for model, parser in expected.items():
        assert model_family(model).tool_parser == parser, model
        assert parser in CALL_MARKERS, f"{parser}: the gate has no call markers for it"
        ToolParserManager.get_tool_parser(parser)  # registered in this vLLM
