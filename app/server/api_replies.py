"""The local API server's replies: an engine's events as OpenAI's chat completion, plain or streamed.

A plain reply is what a stream of the same request sends, joined (see app/server/api_server.py).
A reply that fails part-way ends as an error in both modes, never as a finished answer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

from aiohttp import web

from app.engine.events import (
    AnswerDelta,
    EngineErrorEvent,
    EngineEvent,
    Finished,
    LoopDetected,
    ThinkingDelta,
    ToolCallDelta,
)
from app.server.api_protocol import SERVER_ERROR, ApiError, ChatRequest, engine_error

log = logging.getLogger("app.server.api_server")

Events = AsyncGenerator[EngineEvent, None]


async def complete_reply(request: web.Request, events: Events, rid: str, model_id: str) -> web.Response:
    """The whole reply as one chat.completion."""
    thinking: list[str] = []
    answer: list[str] = []
    loops: list[LoopDetected] = []
    async for event in events:
        if isinstance(event, EngineErrorEvent):
            raise engine_error(event.failure)  # even after part of an answer: it is not the answer
        if isinstance(event, ThinkingDelta):
            thinking.append(event.text)
        elif isinstance(event, AnswerDelta):
            answer.append(event.text)
        elif isinstance(event, LoopDetected):
            loops.append(event)
        elif isinstance(event, Finished):
            check_finished(request, event, rid)
            # The texts a stream would have sent, not Finished's (cut at the loop): the two agree.
            reasoning = "".join(thinking) or None
            message: dict[str, Any] = {"role": "assistant", "content": "".join(answer) or None,
                                       "reasoning": reasoning, "reasoning_content": reasoning}
            if not event.tool_calls and message["content"] is None:
                message["content"] = ""
            if event.tool_calls:
                message["tool_calls"] = [call.as_openai() for call in event.tool_calls]
            if loops:  # the loop guard cut or concluded this reply: say so, and where it cut
                message["loop_guard"] = "\n".join(loop.summary() for loop in loops)
                message["loop_guard_kept_chars"] = loops[-1].kept_char
            return web.json_response({
                "id": rid, "object": "chat.completion", "created": int(time.time()), "model": model_id,
                "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(event)}],
                "usage": _usage(event)})
    raise ApiError(500, "The engine ended the request without a reply.", kind=SERVER_ERROR, code="engine_error")


def check_finished(request: web.Request, finished: Finished, rid: str) -> None:
    """A reply that ended other than by finishing (an abort, an error) is refused."""
    if finished.reason in ("stop", "length", "loop", "tool_calls"):
        return
    if request.transport is None or request.transport.is_closing():
        log.info("API client left during %s; aborted", rid)
    raise ApiError(503, "The request was stopped before the reply finished.", kind=SERVER_ERROR,
                   code="request_aborted")


async def stream_reply(request: web.Request, events: Events, rid: str, chat: ChatRequest,
                       model_id: str) -> web.StreamResponse:
    """The reply as server-sent chat.completion.chunk events, then [DONE] (or an error event)."""
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model_id,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    response: web.StreamResponse | None = None
    try:
        async for event in events:
            if isinstance(event, EngineErrorEvent):
                if response is None:
                    raise engine_error(event.failure)  # nothing sent yet: a plain HTTP error
                await _write_error(response, engine_error(event.failure))
                return response
            if not isinstance(event, (ThinkingDelta, AnswerDelta, ToolCallDelta, LoopDetected, Finished)):
                continue
            if isinstance(event, Finished):
                check_finished(request, event, rid)
            if response is None:  # the first text (or the end) commits to a 200
                response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                                       "Cache-Control": "no-cache"})
                await response.prepare(request)
                await response.write(chunk({"role": "assistant", "content": ""}))
            if isinstance(event, ThinkingDelta):
                await response.write(chunk({"reasoning": event.text, "reasoning_content": event.text}))
            elif isinstance(event, ToolCallDelta):
                await response.write(chunk({"tool_calls": [_call_delta(event)]}))
            elif isinstance(event, AnswerDelta):
                await response.write(chunk({"content": event.text}))
            elif isinstance(event, LoopDetected):  # text already sent past the kept length is to be dropped
                await response.write(chunk({"loop_guard": event.summary(), "loop_guard_kept_chars": event.kept_char}))
            else:
                await response.write(chunk({}, _finish_reason(event)))
                if chat.stream_options is not None and chat.stream_options.include_usage:
                    await response.write(_sse({"id": rid, "object": "chat.completion.chunk", "created": created,
                                               "model": model_id, "choices": [], "usage": _usage(event)}))
                await response.write(b"data: [DONE]\n\n")
                return response
        raise ApiError(500, "The engine ended the request without a reply.", kind=SERVER_ERROR,
                       code="engine_error")
    except ConnectionResetError:
        log.info("API client left during %s; aborted", rid)
        if response is None:
            raise
        return response
    except Exception as exc:
        if response is None:
            raise  # the error middleware answers it
        if not isinstance(exc, ApiError):
            log.exception("local API stream %s failed", rid)
            exc = ApiError(500, "The local API server failed during this reply; see nalar.log.",
                           kind=SERVER_ERROR, code="internal_error")
        with contextlib.suppress(ConnectionResetError):
            await _write_error(response, exc)
        return response


async def first_call_only(events: Events) -> Events:
    """parallel_tool_calls false: the reply's first call only."""
    async with contextlib.aclosing(events):
        async for event in events:
            if isinstance(event, ToolCallDelta) and event.index > 0:
                continue
            if isinstance(event, Finished) and len(event.tool_calls) > 1:
                event = dataclasses.replace(event, tool_calls=event.tool_calls[:1])
            yield event


def _sse(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


async def _write_error(response: web.StreamResponse, error: ApiError) -> None:
    """The stream's last event: the openai client raises it as an APIError. No finish reason, no [DONE]."""
    await response.write(_sse(error.payload()))


def _finish_reason(finished: Finished) -> str:
    if finished.tool_calls:
        return "tool_calls"
    return "length" if finished.reason == "length" else "stop"


def _call_delta(delta: ToolCallDelta) -> dict[str, Any]:
    """A tool_calls delta item in OpenAI's streaming shape: id, type and name come with a call's first."""
    item: dict[str, Any] = {"index": delta.index, "function": {"arguments": delta.arguments_delta}}
    if delta.id is not None:
        item["id"], item["type"] = delta.id, "function"
    if delta.name is not None:
        item["function"]["name"] = delta.name
    return item


def _usage(finished: Finished) -> dict[str, Any]:
    """OpenAI's usage, with the thinking's share in ``completion_tokens_details.reasoning_tokens`` (its field):
    how a client sees that ``thinking_token_budget`` held."""
    m = finished.metrics
    prompt = m.prompt_tokens if m else 0
    thinking = m.thinking_tokens if m else 0
    completion = thinking + (m.answer_tokens if m else 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "completion_tokens_details": {"reasoning_tokens": thinking}}
