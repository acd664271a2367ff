"""Failures before or during a reply end it as a typed error, never as a stream that raises or hangs:
EngineHost.generate's own net, template_messages on hostile arguments, and the engine process's pipe
(both real sides, a scripted double below the child's server)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Sequence
from types import SimpleNamespace
from typing import Any

from app.core.models.model_families import PLAIN
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.base import Message
from app.engine.errors import FailureKind
from app.engine.events import EngineErrorEvent, EngineEvent, EngineReady, Finished
from app.engine.local.host import EngineHost
from app.engine.local.local_reply import request_failure
from app.engine.local.reply_prompt import ReplyPrompts
from app.engine.process import process_server
from app.engine.process.engine_process import EngineProcess
from app.engine.reply.tool_calls import template_messages
from app.engine.requests import Resume
from app.engine.scripted import Script, ScriptedEngineDouble

DEEP_ARGUMENTS = "[" * 200_000  # what a hostile API client sent as an assistant call's arguments
SAMPLING = SamplingConfig(think_budget=0, max_tokens=16)


def test_arguments_nested_past_the_parsers_depth_reach_the_template_as_text() -> None:
    """Bug caught: template_messages caught only ValueError, so arguments of "[" * 200000 raised RecursionError
    out of the prompt's build."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": DEEP_ARGUMENTS}}
    out = template_messages([{"role": "assistant", "content": None, "tool_calls": [call]}])
    assert out[0]["tool_calls"][0]["function"]["arguments"] == DEEP_ARGUMENTS
    assert out[0]["content"] == ""


class TokenizerThatBreaks:
    """Test double: a tokenizer whose decode raises, as a failure of anything between the prompt and vLLM."""

    def apply_chat_template(self, messages: Any, **kwargs: Any) -> str:
        return "prompt"

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [1, 2, 3]

    def decode(self, ids: Any) -> str:
        raise RuntimeError("the tokenizer broke")


def test_a_failure_before_generation_ends_the_reply_as_a_typed_error_and_is_logged(caplog: Any) -> None:
    """Bug caught: EngineHost.generate caught only EngineFailure, so any other exception while the prompt
    was built escaped the stream with no Finished: the engine process's stream failed silently and the
    window (and the API client) waited for ever."""
    host = EngineHost()
    host._engine = SimpleNamespace(errored=False, vllm_config=SimpleNamespace(
        device_config=SimpleNamespace(device_type="cpu"), scheduler_config=SimpleNamespace(max_num_batched_tokens=0)))
    host._prompts = ReplyPrompts(TokenizerThatBreaks(), PLAIN, 2048, reasoning_mode=False)
    host.config = EngineConfig(model="m")
    host.ready = EngineReady("m", "auto", 2048, 10_000, 1.0, 0.1)

    async def reply() -> list[EngineEvent]:
        return [event async for event in host.generate([{"role": "user", "content": "hi"}], SAMPLING, "r1")]

    caplog.set_level(logging.ERROR)
    try:
        events = host.loop_thread.submit(reply()).result(60)
    finally:
        host.loop_thread.stop()
    assert isinstance(events[-2], EngineErrorEvent) and events[-2].failure.kind is FailureKind.REQUEST_FAILED
    assert "the tokenizer broke" in events[-2].failure.message and events[-2].failure.fix
    assert isinstance(events[-1], Finished) and events[-1].reason == "error"
    assert any("r1" in record.getMessage() and record.exc_info for record in caplog.records)


class RaisingScriptedDouble(ScriptedEngineDouble):
    """A scripted double whose generate raises RecursionError on "deep" before any event (as the prompt's
    build did), and plays a short reply otherwise."""

    async def generate(self, messages: Sequence[Message], sampling: SamplingConfig, request_id: str | None = None, *,
                       ignore_eos: bool = False, resume: Resume | None = None,
                       tools: list[dict[str, Any]] | None = None,
                       tool_choice: str | dict[str, Any] | None = None) -> AsyncGenerator[EngineEvent, None]:
        if messages[-1]["content"] == "deep":
            raise RecursionError("maximum recursion depth exceeded")
        self.scripts.append(Script(["fine"], think_start="closed"))
        async for event in super().generate(messages, sampling, request_id, ignore_eos=ignore_eos, resume=resume):
            yield event


def serve_raising_double(conn: Any) -> None:
    process_server.run(conn, RaisingScriptedDouble())


def test_a_stream_that_raises_in_the_engine_process_ends_the_windows_reply() -> None:
    """Bug caught: a stream whose future failed in the engine process sent nothing, so EngineProcess.generate
    waited on its queue for ever and Stop could not end it."""
    engine = EngineProcess(child_main=serve_raising_double)

    async def reply(text: str) -> list[EngineEvent]:
        events = engine.generate([{"role": "user", "content": text}], SAMPLING)
        return await asyncio.wait_for(_collect(events), 30)

    def run(coro: Any) -> Any:
        return engine.loop_thread.submit(coro).result(60)

    try:
        run(engine.start(EngineConfig(model="m", max_model_len=2048)))
        events = run(reply("deep"))
        assert isinstance(events[-2], EngineErrorEvent) and events[-2].failure.kind is FailureKind.REQUEST_FAILED
        assert "RecursionError" in events[-2].failure.message
        assert isinstance(events[-1], Finished) and events[-1].reason == "error"
        events = run(reply("hi"))  # the child is still serving
        assert isinstance(events[-1], Finished) and events[-1].reason == "stop"
    finally:
        engine.close(timeout=10)


async def _collect(events: AsyncGenerator[EngineEvent, None]) -> list[EngineEvent]:
    return [event async for event in events]


def test_a_schema_xgrammar_refuses_is_the_clients_error_naming_response_format() -> None:
    """Bug caught: vLLM's VLLMValidationError for a schema xgrammar can't enforce was a REQUEST_FAILED, so the
    API answered 500 (our fault) instead of a 400 naming response_format."""
    import json

    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    from app.server.api_protocol import engine_error

    schema = {"allOf": [{"type": "string"}, {"enum": ["yes", "no"]}]}  # multi-branch allOf: xgrammar refuses it
    params = SamplingParams(structured_outputs=StructuredOutputsParams(json=json.dumps(schema)))
    try:
        validate_xgrammar_grammar(params)  # what vLLM runs on the request as it is added
    except Exception as exc:  # noqa: BLE001 - the real exception, whatever its class, is what gets classified
        refusal = exc
    else:
        raise AssertionError("xgrammar accepted a multi-branch allOf; pick another schema it refuses")
    host = EngineHost()
    try:
        failure = request_failure(host._engine, "r1", refusal)  # type: ignore[arg-type]
    finally:
        host.loop_thread.stop()
    assert failure.kind is FailureKind.BAD_SCHEMA and failure.fix
    error = engine_error(failure)
    assert (error.status, error.param) == (400, "response_format")
