"""ScriptedEngineDouble: a stand-in engine that plays a fixed script. Not a model.

Used only where behaviour must be deterministic: UI tests (tags cut across deltas,
errors mid-stream, very fast and very slow streams) and the UI throughput benchmark.
It runs on an engine loop thread of its own in the window's process, where EngineProcess (the real
engine's handle) runs too, and emits the same typed events through the <think> tag splitter that plain
models get, so the UI cannot tell them apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.models.model_families import ModelFamily
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.base import EngineBase, EventSink, Message
from app.engine.errors import EngineFailure, FailureKind, engine_stopped
from app.engine.events import ContextTrimmed, EngineErrorEvent, EngineEvent, EngineReady, Finished, FinishReason
from app.engine.reply.reasoning import THINK_CLOSE, ReasoningSplitter, ThinkStart, ThinkTagSplitter, make_splitter
from app.engine.reply.stream import KvFigures, Phase, ReplyStream
from app.engine.reply.tool_calls import ToolCallGate, ToolOffer, gate_for, offer_of, vllm_parse
from app.engine.requests import Resume, ToolChoice, Tools


@dataclass
class Script:
    """One scripted reply: raw model text cut into deltas, played at a fixed rate."""

    deltas: list[str]
    tokens_per_second: float = 200.0
    fail_after: int | None = None  # emit an engine error after this many deltas
    failure: EngineFailure = field(default_factory=engine_stopped)
    prompt_opened_think: bool = False
    think_start: ThinkStart | None = None  # overrides prompt_opened_think: "closed" plays a thinking-off reply
    trimmed_messages: int = 0  # announce that the oldest messages were left out, as EngineHost does
    # A recorded model's reply: each delta's token ids, played through that family's splitter and tool gate
    # with its tokenizer, as EngineHost would (gpt-oss's Harmony channels are read from the ids).
    token_ids: list[list[int]] | None = None
    family: ModelFamily | None = None
    tokenizer: Any = None
    finish: FinishReason = "stop"  # how the script ends when played through: "length" plays a max-tokens cut


class _TextOnlyTokenizer:
    """hermes parses text alone; vLLM's ToolParser only insists that some tokenizer is given."""


class ScriptedEngineDouble(EngineBase):
    """Replays queued ``Script``s; ``start`` succeeds after ``load_seconds`` unless ``start_failure`` is set."""

    can_resume = True

    def __init__(self, scripts: Sequence[Script] = (), *, load_seconds: float = 0.0,
                 start_failure: EngineFailure | None = None, kv_capacity_tokens: int = 46_592,
                 on_status: EventSink | None = None, model_name: str = "scripted-double",
                 reads_images: bool = False) -> None:
        super().__init__(on_status)
        self.scripts = list(scripts)
        self.model_name = model_name  # what EngineReady names: a real model's name picks its family in the window
        self.reads_images = reads_images  # plays a vision model (EngineReady.reads_images)
        self.load_seconds = load_seconds
        self.start_failure = start_failure
        self.kv_capacity_tokens = kv_capacity_tokens
        self.starts: list[EngineConfig] = []
        self.requests: list[list[Message]] = []
        self.samplings: list[SamplingConfig] = []  # each request's sampling
        self.resumes: list[Resume | None] = []  # each request's ``resume``
        self.tool_offers: list[ToolOffer | None] = []  # each request's tools and tool_choice
        self._answer_now: set[str] = set()
        self._aborted: set[str] = set()
        self._abort_events: dict[str, asyncio.Event] = {}  # request id: set by abort(), ends a script's pause
        self.config: EngineConfig | None = None

    async def start(self, config: EngineConfig, *, kv_block_size: int | None = None) -> EngineReady:
        self.starts.append(config)
        self._status("loading", "loading model… (scripted)", 0.2)
        await asyncio.sleep(self.load_seconds)
        if self.start_failure is not None:
            failure, self.start_failure = self.start_failure, None
            self._status("failed", failure.message)
            raise failure
        self.config = config
        self.ready = EngineReady(self.model_name, config.kv_cache_dtype, config.max_model_len,
                                 self.kv_capacity_tokens, self.kv_capacity_tokens / config.max_model_len,
                                 self.load_seconds, reads_images=self.reads_images)
        self._status("ready", "ready: scripted-double", 1.0)
        return self.ready

    async def shutdown(self) -> None:
        if self.ready is not None:
            self.ready = None
            self._status("stopped", "engine stopped")

    async def abort(self, request_id: str) -> None:
        self._aborted.add(request_id)
        if (woken := self._abort_events.get(request_id)) is not None:
            woken.set()

    async def _until_next_token(self, request_id: str, delay: float) -> None:
        """The script's pause before its next token, cut short by an abort: a real engine ends an aborted
        request at its next step, not after a slow script's next token (40 s in some tests)."""
        woken = self._abort_events.setdefault(request_id, asyncio.Event())
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(woken.wait(), delay)

    def request_answer_now(self, request_id: str) -> None:
        self.loop_thread.call_soon(self._answer_now.add, request_id)

    async def generate(self, messages: Sequence[Message], sampling: SamplingConfig, request_id: str | None = None, *,
                       ignore_eos: bool = False, resume: Resume | None = None, tools: Tools | None = None,
                       tool_choice: ToolChoice | None = None) -> AsyncGenerator[EngineEvent, None]:
        """With ``resume``, the script is what the model writes after the kept text (in ``resume.phase``).
        With ``tools``, the script's text goes through vLLM's hermes parser as EngineHost's would: a
        script that writes ``<tool_call>{"name": …, "arguments": …}</tool_call>`` ends in that call."""
        offer = offer_of(tools, tool_choice)
        self.tool_offers.append(offer)
        replies = self._play(messages, sampling, request_id, ignore_eos=ignore_eos, resume=resume)
        gate = self._gate(offer) if offer is not None else None
        async with contextlib.aclosing(replies):
            async for event in replies:
                for out in gate.feed(event) if gate is not None else (event,):
                    yield out

    def _gate(self, offer: ToolOffer) -> ToolCallGate:
        """hermes over text, or the next script's recorded family's own parser with its tokenizer."""
        script = self.scripts[0] if self.scripts else None
        if script is not None and script.family is not None:
            return gate_for(script.family.tool_parser, script.tokenizer, offer)
        return ToolCallGate(offer, vllm_parse("hermes", _TextOnlyTokenizer(), offer))

    async def _play(self, messages: Sequence[Message], sampling: SamplingConfig, request_id: str | None = None, *,
                    ignore_eos: bool = False, resume: Resume | None = None) -> AsyncGenerator[EngineEvent, None]:
        rid = request_id or uuid.uuid4().hex[:12]
        self.requests.append(list(messages))
        self.samplings.append(sampling)
        self.resumes.append(resume)
        if self.ready is None:
            failure = EngineFailure(FailureKind.NOT_READY, "The engine is not running.", "Restart the engine.")
            yield EngineErrorEvent(rid, failure)
            yield Finished(rid, "error", "", "")
            return
        script = self.scripts.pop(0) if self.scripts else Script(["<think>scripted thought</think>", "scripted answer"])
        if script.trimmed_messages:
            yield ContextTrimmed(rid, script.trimmed_messages)
        start = script.think_start if resume is None else "open" if resume.phase == "thinking" else "closed"
        splitter: ReasoningSplitter = ThinkTagSplitter(start=start, prompt_opened_think=script.prompt_opened_think)
        if script.family is not None:
            splitter = make_splitter(script.family.parser, script.tokenizer, start=start or "open")
        interval = 1.0 / script.tokens_per_second
        prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in messages)
        capacity = self.kv_capacity_tokens

        def kv() -> KvFigures:
            return KvFigures(usage=(prompt_tokens + stream.generated_tokens) / capacity, running=1)

        stream = ReplyStream(rid, prompt_tokens=prompt_tokens, max_model_len=self.ready.max_model_len,
                             kv_capacity_tokens=capacity, kv=kv, sampling=sampling)
        if resume is not None:
            stream.resume_from(resume)
        with self.keeping(rid, stream.texts):
            reason: FinishReason = script.finish
            next_at = time.perf_counter()
            skip_thinking = False  # the guard concluded: the script's remaining thinking is not played
            for index, delta in enumerate(script.deltas):
                if skip_thinking:
                    if THINK_CLOSE not in delta:
                        continue
                    skip_thinking, delta = False, delta[delta.index(THINK_CLOSE):]
                if rid in self._aborted:
                    reason = "abort"
                    break
                if script.fail_after is not None and index >= script.fail_after:
                    for event in stream.failed(script.failure):
                        yield event
                    return
                if rid in self._answer_now and splitter.in_thinking:
                    splitter.feed("</think>")
                    self._answer_now.discard(rid)
                next_at += interval
                delay = next_at - time.perf_counter()
                if delay > 0:
                    await self._until_next_token(rid, delay)
                    if rid in self._aborted:
                        reason = "abort"
                        break
                elif index % 64 == 0:
                    await asyncio.sleep(0)  # a very fast script still lets abort in
                phase: Phase = "thinking" if splitter.in_thinking else "answer"
                ids = script.token_ids[index] if script.token_ids is not None else 1  # else a delta is a token
                for event in stream.step(phase, splitter.feed(delta, [] if isinstance(ids, int) else ids), ids):
                    yield event
                if stream.loop is not None:
                    loop = stream.act_on_loop(can_resample=False)  # a script can't be sampled again
                    yield loop
                    if loop.outcome in ("stopped", "cut"):
                        reason = "loop"
                        break
                    skip_thinking = loop.outcome == "concluded"
                if index % 16 == 0:
                    yield stream.metrics()
            for event in stream.texts.take(rid, splitter.flush()):
                yield event
            self._aborted.discard(rid)
            for event in stream.finished(reason):
                yield event
