"""EngineHost: owns vLLM's AsyncLLM (its engine client) on the engine loop thread of the process it runs in.

In the app that is the engine process (app.engine.process.process_server), a child of the window; benchmarks and
commands may run it in their own process.

Every ``async def`` here runs on the engine loop. Other threads reach them with
``host.loop_thread.submit(...)`` (sync callers) or ``on_engine(...)`` (async
callers on another loop). ``generate`` is an async stream of typed events.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.base import EngineBase, EventSink, Message
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import (
    ContextTrimmed,
    EngineErrorEvent,
    EngineEvent,
    EngineReady,
    Finished,
    SpecDecodeFigures,
)
from app.engine.local import vllm_logging
from app.engine.local.engine_start import LocalStart, check_model_path
from app.engine.local.kv_stats import KvStats
from app.engine.local.local_reply import (
    LocalReply,
    ReplyRequests,
    answer_constraint,
    check_seed,
    engine_prompt,
    request_failure,
)
from app.engine.local.reply_prompt import (
    FORCED_THINK_CLOSE,
    REASONING_SYSTEM_PROMPT,
    ReplyPrompts,
    image_prompt,
    kept_images,
)
from app.engine.machine.orphans import OrphanWatch, end_processes, record_engine_processes, same_process
from app.engine.reply.reasoning import make_splitter, think_start_of_prompt
from app.engine.reply.stream import ReplyStream
from app.engine.reply.tool_calls import ToolCallGate, ToolOffer, forced_schema, gate_for, offer_of
from app.engine.requests import Resume, ToolChoice, Tools

__all__ = ["FORCED_THINK_CLOSE", "REASONING_SYSTEM_PROMPT", "EngineHost", "check_model_path"]
log = logging.getLogger(__name__)
IGNORE_EOS_ENV = "NALAR_IGNORE_EOS"


class EngineHost(EngineBase):
    """vLLM's engine client, in this process (EngineCore runs in vLLM's own child). Construct on any thread;
    its coroutines run on ``loop_thread``."""

    can_resume = True

    def __init__(self, on_status: EventSink | None = None) -> None:
        super().__init__(on_status)
        self._engine: Any = None
        self._prompts: ReplyPrompts | None = None
        self.config: EngineConfig | None = None  # what the running engine was started with (its plan's)
        self.ready: EngineReady | None = None
        self.kv = KvStats()
        self.engine_log = vllm_logging.engine_log_path()
        self._engine_processes: list[tuple[int, float]] = []  # (pid, start time) of this engine's processes
        self._starting: LocalStart | None = None  # the start under way
        self._live: dict[str, str] = {}  # our request id → vLLM's current request id
        self._answer_now: set[str] = set()
        self._aborted: set[str] = set()
        self._orphans = OrphanWatch()
        self.start_phases: list[tuple[str, float]] = []  # the last start's phases, as vLLM logged them

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self, config: EngineConfig, *, kv_block_size: int | None = None) -> EngineReady:
        """Load the model. Raises EngineFailure; the engine is then stopped and can start again.

        ``kv_block_size`` is for benchmarks (the saturation sweep's small pool); None is vLLM's choice.
        """
        if self._engine is not None:
            await self.shutdown()
        self._status("loading", "checking settings…", 0.02)
        # An engine that speculates counts from zero, so its first reply's counters start from a baseline too.
        self.kv = KvStats(speculation=SpecDecodeFigures() if config.speculative_method != "off" else None)
        starting = self._starting = LocalStart(self._status, self.kv)
        try:
            loaded = await starting.run(config, kv_block_size)
        except EngineFailure as failure:
            self._status("failed", failure.message)
            raise
        finally:
            self._starting, self.start_phases, self.engine_log = None, starting.phases, starting.engine_log
        self._engine, self._prompts, self._engine_processes = loaded.engine, loaded.prompts, loaded.processes
        ready = self.ready = loaded.ready
        self.config = ready.plan.config if ready.plan is not None else config
        self._status("ready", f"ready: {ready.model} · KV {ready.kv_cache_dtype} · "
                              f"{ready.kv_capacity_tokens:,} tokens", 1.0)
        self._orphans.start()
        return ready

    async def shutdown(self) -> None:
        """Stop the engine and its EngineCore process. Safe to call twice."""
        engine, self._engine, self.ready = self._engine, None, None
        self._orphans.stop()
        if engine is None:
            return
        self._status("stopping", "stopping engine…")
        # Synchronous (SIGTERM, a grace period, then it kills the process tree). It runs on this
        # loop on purpose: from another thread it races vLLM's output handler task.
        engine.shutdown()
        del engine
        gc.collect()  # drop AsyncLLM now; its __del__ at interpreter exit would shut down again
        record_engine_processes()  # what is left (nothing, or multiprocessing's resource tracker)
        self._status("stopped", "engine stopped")

    def close(self, timeout: float = 30.0) -> None:
        """Shut down; if vLLM's shutdown didn't finish in time, end its processes ourselves."""
        if self._starting is not None:
            self._starting.end_load()
        super().close(timeout)
        end_processes([proc for pid, created in self._engine_processes if (proc := same_process(pid, created))],
                      "engine shutdown left %d process(es); ending them")

    @property
    def is_ready(self) -> bool:
        return self._engine is not None and not getattr(self._engine, "errored", False)

    def engine_died(self) -> bool:
        """True once a started engine's process is gone (vLLM's monitor thread notices). Thread-safe read."""
        engine = self._engine
        return engine is not None and bool(getattr(engine, "errored", False))

    # ---- requests --------------------------------------------------------------------------

    def request_answer_now(self, request_id: str) -> None:
        """End thinking early; thread-safe."""
        self.loop_thread.call_soon(self._answer_now.add, request_id)

    async def abort(self, request_id: str) -> None:
        self._aborted.add(request_id)
        vllm_id = self._live.get(request_id)
        if vllm_id and self._engine is not None:
            await self._engine.abort(vllm_id)

    def fit_prompt(self, messages: Sequence[Message], reserve: int, opened_think: bool,
                   tools: Sequence[dict[str, Any]] = ()) -> tuple[list[int], int]:
        """Token ids of the chat prompt, dropping the oldest turns until ``reserve`` tokens fit after it
        (ReplyPrompts.fit); benchmarks and commands build their prompts with it."""
        assert self._prompts is not None, "the engine is not ready"
        return self._prompts.fit(messages, reserve, opened_think, tools)

    def tool_gate(self, offer: ToolOffer) -> ToolCallGate:
        """The family's vLLM tool parser over a reply's events (see tool_calls.gate_for)."""
        assert self._prompts is not None
        return gate_for(self._prompts.family.tool_parser, self._prompts.tokenizer, offer)

    async def generate(self, messages: Sequence[Message], sampling: SamplingConfig, request_id: str | None = None, *,
                       ignore_eos: bool = False, resume: Resume | None = None, tools: Tools | None = None,
                       tool_choice: ToolChoice | None = None) -> AsyncGenerator[EngineEvent, None]:
        """Stream one reply: thinking and answer deltas, metrics, then exactly one Finished.

        ``ignore_eos`` is for benchmarks that need a fixed number of tokens. ``NALAR_IGNORE_EOS=1`` sets it
        for a whole app process: tests that act mid-reply need replies as long on a fast machine as a slow one.
        ``resume`` goes on with a reply the loop guard cut, after its kept text (prefix caching keeps it cheap).
        """
        rid = request_id or uuid.uuid4().hex[:12]
        ignore_eos = ignore_eos or os.environ.get(IGNORE_EOS_ENV) == "1"
        try:
            if not self.is_ready:
                raise EngineFailure(FailureKind.NOT_READY, "The engine is not running.",
                                    "Wait for the model to load, or restart the engine.")
            offer = offer_of(tools, tool_choice)
            gate = self.tool_gate(offer) if offer is not None else None
            async for event in self._generate(list(messages), sampling, rid, ignore_eos, resume, offer):
                for out in gate.feed(event) if gate is not None else (event,):
                    yield out
        except EngineFailure as failure:
            yield EngineErrorEvent(rid, failure)
            yield Finished(rid, "error", "", "")
        except Exception as exc:  # noqa: BLE001 (logged in request_failure): e.g. a prompt the template can't build
            yield EngineErrorEvent(rid, request_failure(self._engine, rid, exc))
            yield Finished(rid, "error", "", "")
        finally:
            self._live.pop(rid, None)
            self._answer_now.discard(rid)
            self._aborted.discard(rid)

    @property
    def tokenizer(self) -> Any:
        """The engine's tokenizer (None until it is ready): benchmarks build their prompts with it."""
        return self._prompts.tokenizer if self._prompts is not None else None

    def raw_generate(self, ids: list[int], params: Any, request_id: str) -> AsyncIterator[Any]:
        """vLLM's own output stream for ``ids``, past the reply layer: benchmarks measure the engine itself."""
        return self._engine.generate(self.engine_prompt(ids), params, request_id)

    def engine_prompt(self, ids: list[int]) -> Any:
        """Token ids as this engine's vLLM takes them (local_reply.engine_prompt)."""
        return engine_prompt(self._engine, ids)

    async def _generate(self, messages: list[Message], sampling: SamplingConfig, rid: str, ignore_eos: bool,
                        resume: Resume | None, offer: ToolOffer | None = None) -> AsyncGenerator[EngineEvent, None]:
        """One reply: its prompt and splitter here, its requests by ReplyRequests.run (think, then maybe
        answer), then exactly one Finished (stop, length, loop, abort, or error with the partial reply kept)."""
        prompts = self._prompts
        assert prompts is not None
        thinking_on = prompts.thinking_on(sampling)
        messages, image_sets = image_prompt(messages, self.ready)
        prompt_ids, dropped = prompts.for_reply(messages, sampling, thinking_on, offer)
        images = kept_images(messages, image_sets, dropped)
        check_seed(self._engine.vllm_config, sampling, len(prompt_ids))
        if dropped:
            yield ContextTrimmed(rid, dropped)
        start = think_start_of_prompt(prompts.tokenizer.decode(prompt_ids[-8:])) or ("open" if thinking_on else "none")
        kept = prompts.resumed_thinking(resume.thinking) if resume is not None and thinking_on else []
        splitter = make_splitter(prompts.family.parser, prompts.tokenizer, start=start, kept_ids=kept)
        reply = self._new_reply(rid, sampling, prompt_ids, thinking_on, ignore_eos, offer)
        close_ids = prompts.encode(prompts.forced_close)
        if resume is not None:
            reply.generated_ids = kept
            reply.stream.resume_from(resume, len(kept))
        requests = ReplyRequests(self._engine, lambda ids: engine_prompt(self._engine, ids, images), self._live,
                                 self._aborted, self._answer_now, prompts.tokenizer.decode)
        resumed_answer = prompts.encode(resume.answer) if resume is not None and resume.phase == "answer" else None
        with self.keeping(rid, reply.stream.texts):
            try:
                async for event in requests.run(reply, splitter, close_ids, resumed_answer):
                    yield event
            except asyncio.CancelledError:
                yield reply.stream.aborted()
                raise
            except Exception as exc:  # noqa: BLE001 (logged in request_failure): keep the partial reply
                for event in reply.stream.failed(request_failure(self._engine, rid, exc)):
                    yield event
                return
            for event in reply.stream.finished(reply.finish):
                yield event

    def _new_reply(self, rid: str, sampling: SamplingConfig, prompt_ids: list[int], thinking_on: bool,
                   ignore_eos: bool, offer: ToolOffer | None) -> LocalReply:
        """The reply's state and stream, with this engine's figures."""
        ready = self.ready  # kept: a shutdown mid-reply clears self.ready
        assert ready is not None
        stream = ReplyStream(rid, prompt_tokens=len(prompt_ids), max_model_len=ready.max_model_len,
                             kv_capacity_tokens=ready.kv_capacity_tokens,
                             kv=lambda: self.kv.figures(), sampling=sampling)
        return LocalReply(stream, sampling, prompt_ids, sampling.think_budget if thinking_on else 0, ignore_eos,
                          can_conclude=thinking_on,
                          constraint=answer_constraint(sampling, forced_schema(offer) if offer is not None else None),
                          keep_special_tokens=offer is not None)
