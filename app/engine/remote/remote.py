"""RemoteEngine: a remote OpenAI-compatible chat-completions endpoint as an engine backend.

It speaks the streaming API through the ``openai`` package on the engine loop thread and emits
the same typed events as EngineHost. Reasoning that arrives as ``reasoning_content`` (DeepSeek,
older vLLM) or ``reasoning`` (newer vLLM) goes to the thinking pane; from a server that sends no
such field, content goes through our ``<think>`` splitter (RemoteReplySplitter decides).

The API key is handed in by the caller (it comes from the keyring) and is never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import httpx
import openai
from openai import AsyncOpenAI

from app.core.models.model_families import model_family
from app.core.settings.redaction import redact, remember_secret
from app.core.settings.settings import MAX_THINK_BUDGET, EndpointProfile, EngineConfig, SamplingConfig, budget_effort
from app.engine.base import EngineBase, EventSink, Message
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import EngineEvent, EngineReady, FinishReason
from app.engine.remote.answers import StreamedCalls, served_context, served_models
from app.engine.remote.capped import CappedTransport, failure_inside
from app.engine.remote.continuation import NO_TOKENIZE, ServerContinuation, family_refusal
from app.engine.reply.reasoning import RemoteReplySplitter, Split, think_start_for_model
from app.engine.reply.stream import Phase, ReplyStream
from app.engine.reply.tool_calls import without_reasoning
from app.engine.requests import Resume, ToolChoice, Tools

log = logging.getLogger(__name__)

NO_KEY = "no-key"  # the openai client insists on a key; servers without auth ignore it
NOT_STARTED_FIX = "Check the profile in Settings → Backends, then restart the engine."


def _delta_reasoning(delta: Any) -> str:
    """Reasoning text of a streamed delta, under either field name servers use."""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(delta, name, None)
        if value is None and delta.model_extra:
            value = delta.model_extra.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


class _Aborted(Exception):
    """The user (or a failover) stopped this reply."""


class RemoteEngine(EngineBase):
    """One remote profile. ``start`` checks the server and the model; ``generate`` streams a reply."""

    def __init__(self, profile: EndpointProfile, api_key: str | None, *, first_token_timeout_s: float = 5.0,
                 on_status: EventSink | None = None) -> None:
        super().__init__(on_status)
        self.profile = profile
        self.backend_name = profile.name
        self._api_key = api_key or NO_KEY
        remember_secret(api_key)  # a server's error text that echoes it is shown and logged without it
        self.first_token_timeout_s = first_token_timeout_s
        self._client: AsyncOpenAI | None = None
        self.model = profile.model
        self._stops: dict[str, asyncio.Event] = {}  # set by abort: ends a wait for the next chunk at once
        self._continuation: ServerContinuation | None = None  # a vLLM server's way to go on from a given text
        self.can_resume = False
        self.resume_refusal = ""

    def __repr__(self) -> str:  # never shows the key
        return f"RemoteEngine({self.profile.name!r}, {self.profile.base_url!r})"

    # ---- errors ------------------------------------------------------------------------------

    def failure_for(self, exc: BaseException) -> EngineFailure:
        """Map what the openai client (or httpx, for /tokenize) raised to a failure naming the endpoint and fix."""
        return endpoint_failure(exc, self.profile, self.model, self.first_token_timeout_s)

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self, config: EngineConfig, *, kv_block_size: int | None = None) -> EngineReady:
        """Check the server answers and serves the model. The local EngineConfig doesn't apply here."""
        started = time.perf_counter()
        await self.shutdown()
        self._status("loading", f"connecting to {self.profile.base_url}…", 0.2)
        timeout = openai.Timeout(None, connect=self.first_token_timeout_s)
        client = AsyncOpenAI(base_url=self.profile.base_url, api_key=self._api_key, max_retries=0, timeout=timeout,
                             http_client=openai.DefaultAsyncHttpxClient(transport=CappedTransport()))
        try:
            models = await asyncio.wait_for(client.models.list(), self.first_token_timeout_s)
            served = served_models(models.data, self.profile.base_url)
            if not self.model:
                if not served:
                    raise EngineFailure(FailureKind.MODEL_NOT_FOUND, f"{self.profile.base_url} serves no model.",
                                        "Load a model on the server, or pick another profile.")
                self.model = next(iter(served))
            elif served and self.model not in served:
                raise EngineFailure(FailureKind.MODEL_NOT_FOUND,
                                    f"{self.profile.base_url} doesn't serve “{self.model}”.",
                                    f"Set the model of profile “{self.profile.name}” to one of: "
                                    f"{', '.join(sorted(served))[:300]}.")
        except (EngineFailure, openai.OpenAIError, asyncio.TimeoutError, OSError) as exc:
            await client.close()
            failure = self.failure_for(exc)
            self._status("failed", failure.message)
            raise failure from None
        self._client = client
        await self._find_continuation()
        max_len, note = served_context(served.get(self.model), self.profile.base_url)
        self.ready = EngineReady(model=f"{self.profile.name}: {self.model}", kv_cache_dtype="", backend="remote",
                                 max_model_len=max_len, kv_capacity_tokens=0, max_concurrency=0.0,
                                 load_seconds=time.perf_counter() - started)
        if note:
            log.warning("profile %s: %s", self.profile.name, note)
        self._status("ready", f"ready: {self.model} at {self.profile.base_url} (profile “{self.profile.name}”)"
                              + (f" · {note}" if note else ""), 1.0)
        return self.ready

    async def _find_continuation(self) -> None:
        """Whether a cut or paused reply can go on from its text here (``can_resume``), and if not, why."""
        self.resume_refusal = family_refusal(model_family(self.model), self.model)
        if not self.resume_refusal:
            self._continuation = await ServerContinuation.probe(self.profile.base_url, self.model, self._api_key,
                                                                self.first_token_timeout_s)
            self.resume_refusal = "" if self._continuation else NO_TOKENIZE.format(url=self.profile.base_url)
        self.can_resume = self._continuation is not None

    async def shutdown(self) -> None:
        client, self._client, self.ready = self._client, None, None
        continuation, self._continuation, self.can_resume = self._continuation, None, False
        for stop in self._stops.values():
            stop.set()
        if continuation is not None:
            await continuation.close()
        if client is not None:
            await client.close()
            self._status("stopped", f"disconnected from {self.profile.base_url}")

    # ---- requests ----------------------------------------------------------------------------

    async def abort(self, request_id: str) -> None:
        self._stops.setdefault(request_id, asyncio.Event()).set()

    async def _until_stopped(self, awaitable: Any, rid: str, timeout: float | None) -> Any:
        """Await the next step of a reply unless it is aborted first (raises _Aborted) or times out."""
        step = asyncio.ensure_future(awaitable)
        stopper = asyncio.ensure_future(self._stops.setdefault(rid, asyncio.Event()).wait())
        try:
            done, _ = await asyncio.wait({step, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if step in done:
            return step.result()
        step.cancel()
        with contextlib.suppress(BaseException):
            await step
        if self._stops[rid].is_set():
            raise _Aborted
        raise asyncio.TimeoutError

    def request_answer_now(self, request_id: str) -> None:
        """A remote server can't be told to stop thinking mid-stream; the reply goes on."""
        log.info("answer-now is not supported by remote profile %s", self.profile.name)

    async def generate(self, messages: Sequence[Message], sampling: SamplingConfig, request_id: str | None = None, *,
                       ignore_eos: bool = False, resume: Resume | None = None, tools: Tools | None = None,
                       tool_choice: ToolChoice | None = None) -> AsyncGenerator[EngineEvent, None]:
        """``resume`` goes on from a cut or paused reply's text where the server can (``can_resume``, through
        its completions endpoint); elsewhere the caller asks anew."""
        rid = request_id or uuid.uuid4().hex[:12]
        ready = self.ready
        stream = ReplyStream(rid, max_model_len=ready.max_model_len if ready else 0, sampling=sampling)
        start = think_start_for_model(self.model, None, sampling.thinking)
        splitter = RemoteReplySplitter(start)
        finish: FinishReason = "stop"
        calls = StreamedCalls(f"{self.profile.base_url.rstrip('/')}/chat/completions")

        with self.keeping(rid, stream.texts):
            try:
                if self._client is None or ready is None:
                    raise EngineFailure(FailureKind.NOT_READY, f"Profile “{self.profile.name}” is not connected.",
                                        NOT_STARTED_FIX)
                if resume is not None and self._continuation is not None:
                    stream.resume_from(resume)  # the kept text is the reply's now: a failure or Stop below keeps it
                    # Each of its requests is bounded by the budget, and all of them by Stop.
                    going_on = await self._until_stopped(self._continuation.prompt(
                        messages, sampling, resume, start == "open", tools, self.first_token_timeout_s), rid, None)
                    splitter = RemoteReplySplitter(going_on.start)
                    stream.resume_from(resume, going_on.kept_tokens)
                    request = self._client.completions.create(**completion_request(
                        self.model, going_on.ids, sampling, going_on.kept_tokens, ignore_eos))
                else:
                    request = self._client.chat.completions.create(**chat_request(
                        self.model, messages, sampling, tools, tool_choice, send_budget=self.profile.send_think_budget,
                        ignore_eos=ignore_eos))
                # The server may take its time before the first chunk: that wait is what the budget bounds.
                chunk_stream: AsyncIterator[Any] = await self._until_stopped(request, rid, self.first_token_timeout_s)
                async with contextlib.aclosing(chunk_stream) as chunks:  # type: ignore[type-var]
                    iterator = aiter(chunks)
                    while True:
                        try:
                            first = stream.first_token_at is None
                            chunk = await self._until_stopped(
                                anext(iterator), rid, self.first_token_timeout_s if first else None)
                        except StopAsyncIteration:
                            break
                        if chunk.usage is not None:
                            take_usage(stream, chunk.usage)
                        if not chunk.choices:
                            continue
                        content, reasoning, call_deltas, finish_reason = chunk_parts(chunk.choices[0])
                        for event in calls.feed(rid, call_deltas):
                            yield event
                        for event in text_events(stream, splitter.feed(content, reasoning)):
                            yield event
                        if finish_reason:
                            finish = ("length" if finish_reason == "length" else
                                      "tool_calls" if finish_reason == "tool_calls" else "stop")
                        if stream.loop is not None:
                            # A server can't be told to close the think block mid-stream: a loop ends the reply.
                            loop = stream.act_on_loop(can_conclude=False, can_resample=False)
                            yield loop
                            if loop.outcome != "warned":
                                finish = "loop"
                                break
                        if stream.first_token_at is not None and (metrics := stream.due_metrics()) is not None:
                            yield metrics
                for event in stream.texts.take(rid, splitter.flush()):
                    yield event
            except _Aborted:
                finish = "abort"
            except asyncio.CancelledError:
                yield stream.aborted()
                raise
            except (EngineFailure, openai.OpenAIError, httpx.HTTPError, asyncio.TimeoutError, OSError) as exc:
                # Keep what arrived; say what went wrong and where.
                failure = self.failure_for(exc)
                if not isinstance(exc, EngineFailure):
                    log.warning("request %s to profile %s failed: %s", rid, self.profile.name, type(exc).__name__)
                for event in stream.failed(failure):
                    yield event
                return
            finally:
                self._stops.pop(rid, None)
            if calls.calls() and finish == "stop":
                finish = "tool_calls"
            for event in stream.finished(finish, calls.calls()):
                yield event


def endpoint_failure(exc: BaseException, profile: EndpointProfile, model: str, timeout_s: float) -> EngineFailure:
    """What the openai client (or httpx) raised, as a failure that names the endpoint and the fix."""
    url, name = profile.base_url, profile.name
    if (capped := failure_inside(exc)) is not None:  # an answer past its cap, or one Nalar can't use
        return capped
    if isinstance(exc, (openai.APITimeoutError, asyncio.TimeoutError, TimeoutError)):
        return EngineFailure(FailureKind.TIMEOUT,
                             f"{url} (profile “{name}”) did not answer within {timeout_s:g} s.",
                             "Check that the server is up and reachable, or raise the first-token budget.")
    if isinstance(exc, (openai.APIConnectionError, httpx.TransportError)):
        return EngineFailure(FailureKind.UNREACHABLE, f"Can't reach {url} (profile “{name}”).",
                             "Check the base URL and that the server is running and reachable from here.")
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        return EngineFailure(FailureKind.UNAUTHORIZED,
                             f"{url} refused the API key of profile “{name}” ({exc.status_code}).",
                             f"Check the key of profile “{name}” in Settings → Backends.")
    if isinstance(exc, openai.NotFoundError) and not model:
        return EngineFailure(FailureKind.UNREACHABLE,
                             f"{url} (profile “{name}”) has no OpenAI-compatible API there (404).",
                             "Check the base URL: it usually ends in /v1.")
    if isinstance(exc, openai.NotFoundError):
        return EngineFailure(FailureKind.MODEL_NOT_FOUND,
                             f"{url} (profile “{name}”) has no model “{model}” or no chat API there.",
                             "Set the profile's model to one the server lists at /v1/models, "
                             "and check the base URL ends in /v1.")
    if isinstance(exc, openai.BadRequestError) and "context" in str(exc).lower():
        return EngineFailure(FailureKind.PROMPT_TOO_LONG,
                             f"{url} says the conversation is too long for “{model}”.",
                             "Start a new conversation or lower the max answer tokens.")
    if isinstance(exc, openai.APIStatusError):
        return EngineFailure(FailureKind.REQUEST_FAILED,
                             # redacted before it is cut, so no part of a key is left at the cut
                             f"{url} (profile “{name}”) answered {exc.status_code}: {redact(exc.message)[:200]}",
                             "Check the server's log; try again.")
    return EngineFailure(FailureKind.REQUEST_FAILED, f"The request to {url} failed: {exc}", "Try again.")


def chunk_parts(choice: Any) -> tuple[str, str, Sequence[Any], str | None]:
    """A streamed choice's content, reasoning, tool-call deltas and finish reason. A completions choice has
    text alone: no server-side split, no parsed calls."""
    delta = getattr(choice, "delta", None)
    if delta is None:
        return getattr(choice, "text", None) or "", "", (), choice.finish_reason
    return delta.content or "", _delta_reasoning(delta), delta.tool_calls or (), choice.finish_reason


def take_usage(stream: ReplyStream, usage: Any) -> None:
    """The server's token counts: the prompt's, and vLLM's prefix-cache hit on it where the server reports one
    (``--enable-prompt-tokens-details``)."""
    stream.prompt_tokens = usage.prompt_tokens or 0
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    if cached is not None and stream.prompt_tokens:
        stream.prefix_cache = (int(cached), stream.prompt_tokens)


def completion_request(model: str, prompt_ids: list[int], sampling: SamplingConfig, kept_tokens: int,
                       ignore_eos: bool = False) -> dict[str, Any]:
    """The streamed completions request that goes on after ``prompt_ids``: the tokens left to the reply (the
    kept text spent the rest), and the request's controls that the completions endpoint takes."""
    kwargs: dict[str, Any] = {
        "model": model, "prompt": prompt_ids, "stream": True,
        "temperature": sampling.temperature, "top_p": sampling.top_p,
        "max_tokens": max(1, sampling.think_budget + sampling.max_tokens - kept_tokens),
        "stream_options": {"include_usage": True}}
    kwargs.update({key: value for key, value in request_fields(sampling, None, None).items()
                   if key != "response_format"})
    if ignore_eos:
        kwargs["extra_body"] = {"ignore_eos": True}
    return kwargs


def chat_request(model: str, messages: Sequence[Message], sampling: SamplingConfig, tools: Tools | None,
                 tool_choice: ToolChoice | None, send_budget: bool = False, ignore_eos: bool = False) -> dict[str, Any]:
    """The streamed chat-completions request for ``model``, as the openai client's keyword arguments.
    ``send_budget``: the profile's switch to send the think budget in vLLM's and OpenAI's fields too (Nalar's
    own count still cuts the reply; a server that enforces it just stops earlier)."""
    kwargs: dict[str, Any] = {
        "model": model, "messages": without_reasoning(messages), "stream": True,
        "temperature": sampling.temperature, "top_p": sampling.top_p,
        "max_tokens": sampling.think_budget + sampling.max_tokens,
        "stream_options": {"include_usage": True}}
    if model_family(model).thinking == "hybrid":  # the Think switch, the way vLLM's server takes it
        kwargs["extra_body"] = {"chat_template_kwargs": {"enable_thinking": sampling.thinking}}
    if send_budget and sampling.thinking:
        unlimited = sampling.think_budget >= MAX_THINK_BUDGET
        kwargs.setdefault("extra_body", {})["thinking_token_budget"] = -1 if unlimited else sampling.think_budget
        effort = budget_effort(sampling.think_budget)
        if effort is not None or model_family(model).parser == "openai_gptoss":
            kwargs["reasoning_effort"] = effort or sampling.reasoning_effort
    if ignore_eos:  # vLLM's field, for benchmarks and tests: sent only when asked for
        kwargs.setdefault("extra_body", {})["ignore_eos"] = True
    kwargs.update(request_fields(sampling, tools, tool_choice))
    return kwargs


def text_events(stream: ReplyStream, part: Split) -> list[EngineEvent]:
    """A chunk's thinking and answer text as the stream's events. Servers send about one token per
    chunk: a phase's text from one chunk counts as one token."""
    events: list[EngineEvent] = []
    phases: tuple[tuple[Phase, str], ...] = (("thinking", part.thinking), ("answer", part.answer))
    for phase, text in phases:
        if text:
            events.extend(stream.step(phase, Split(text, "") if phase == "thinking" else Split("", text), 1))
    return events


def request_fields(sampling: SamplingConfig, tools: Tools | None, tool_choice: ToolChoice | None) -> dict[str, Any]:
    """The request's tools and controls in OpenAI's shape, for a remote server."""
    asked = sampling.request
    fields: dict[str, Any] = {}
    if tools:
        fields["tools"] = list(tools)
        fields["tool_choice"] = tool_choice if tool_choice is not None else "auto"
    if asked.stop:
        fields["stop"] = list(asked.stop)
    if asked.seed is not None:
        fields["seed"] = asked.seed
    if asked.presence_penalty:
        fields["presence_penalty"] = asked.presence_penalty
    if asked.frequency_penalty:
        fields["frequency_penalty"] = asked.frequency_penalty
    if asked.json_schema is not None:
        fields["response_format"] = {"type": "json_schema",
                                     "json_schema": {"name": "answer", "schema": json.loads(asked.json_schema)}}
    elif asked.json_object:
        fields["response_format"] = {"type": "json_object"}
    return fields
