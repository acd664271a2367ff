"""FailoverEngine: a primary backend with a fallback, under a first-token latency budget.

If the primary can't serve a request (not loaded, died, an error before its first token, or
no first token within the budget), that request is aborted there and sent to the fallback.
Once the primary's first token has arrived, the reply stays with it: a failure after that
keeps the partial reply, as a single engine would.

Each child keeps its own engine loop thread (vLLM's AsyncLLM is bound to its loop); events
cross to this engine's loop through a queue.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.loop_thread import on_engine
from app.core.settings.redaction import redact
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.base import EngineBase, EventSink, Message
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import (
    AnswerDelta,
    BackendChosen,
    EngineErrorEvent,
    EngineEvent,
    EngineReady,
    Finished,
    StatusChanged,
    ThinkingDelta,
    ToolCallDelta,
)
from app.engine.reply.reasoning import ReplyTexts
from app.engine.requests import Resume, ToolChoice, Tools

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _RelayEnded:
    """The child's stream task ended (normally after its Finished; otherwise it crashed)."""

    error: BaseException | None


class _Relay:
    """One request running on a child engine's loop, its events queued on ours."""

    def __init__(self, engine: EngineBase, messages: Sequence[Message], sampling: SamplingConfig, rid: str,
                 ignore_eos: bool, tools: Tools | None = None, tool_choice: ToolChoice | None = None) -> None:
        self.engine = engine
        self.queue: asyncio.Queue[EngineEvent | _RelayEnded] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def sink(event: EngineEvent) -> None:
            loop.call_soon_threadsafe(self.queue.put_nowait, event)

        def ended(future: concurrent.futures.Future[Finished | None]) -> None:
            error = None if future.cancelled() else future.exception()
            loop.call_soon_threadsafe(self.queue.put_nowait, _RelayEnded(error))

        self.future = engine.loop_thread.submit(
            engine.stream_to(sink, messages, sampling, rid, ignore_eos=ignore_eos, tools=tools,
                             tool_choice=tool_choice))
        self.future.add_done_callback(ended)

    async def stop(self, rid: str) -> None:
        """Abort the request on the child and wait until its stream has ended."""
        if self.future.done():
            return
        with contextlib.suppress(Exception):
            await on_engine(self.engine.loop_thread, self.engine.abort(rid))
        done, _ = await asyncio.wait({asyncio.wrap_future(self.future)}, timeout=10)
        if not done:  # it did not end by itself: cancel its task
            self.future.cancel()
        for finished in done:
            if not finished.cancelled():
                finished.exception()  # reported through the queue already; retrieved so asyncio stays quiet


class FailoverEngine(EngineBase):
    """Answers with ``primary``; falls back to ``fallback`` when the primary can't serve in time."""

    def __init__(self, primary: EngineBase, fallback: EngineBase, *, first_token_budget_s: float = 5.0,
                 on_status: EventSink | None = None) -> None:
        super().__init__(on_status)
        self.primary = primary
        self.fallback = fallback
        self.backend_name = primary.backend_name
        self.first_token_budget_s = first_token_budget_s
        self.fallback_failure: EngineFailure | None = None
        self._live: dict[str, EngineBase] = {}
        self._aborted: set[str] = set()
        self._stopping: set[asyncio.Task[None]] = set()  # primaries being aborted in the background
        primary.set_status_sink(self._primary_status)
        fallback.set_status_sink(self._fallback_status)

    def _primary_status(self, event: EngineEvent) -> None:
        self._on_status(event)

    def _fallback_status(self, event: EngineEvent) -> None:
        # One status line: the primary's. The fallback's own lifecycle only goes to the log.
        if isinstance(event, StatusChanged):
            log.info("fallback %s: %s", self.fallback.backend_name, event.message)

    def _can_serve(self, engine: EngineBase) -> bool:
        return engine.ready is not None and not engine.engine_died()

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self, config: EngineConfig, *, kv_block_size: int | None = None) -> EngineReady:
        """Start both; ready if either is. Raises the primary's failure when neither starts."""
        results = await asyncio.gather(on_engine(self.primary.loop_thread, self.primary.start(config)),
                                       on_engine(self.fallback.loop_thread, self.fallback.start(config)),
                                       return_exceptions=True)
        primary, fallback = results
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, EngineFailure):
                raise result
        self.fallback_failure = fallback if isinstance(fallback, EngineFailure) else None
        if isinstance(primary, EngineReady):
            self.ready = primary
            if self.fallback_failure:
                self._status("ready", f"ready: {primary.model} · fallback {self.fallback.backend_name} "
                                      f"unavailable: {self.fallback_failure.message}", 1.0)
            return primary
        assert isinstance(primary, EngineFailure)
        if isinstance(fallback, EngineReady):
            self.ready = fallback
            self._status("ready", f"{self.primary.backend_name} failed ({primary.message}); "
                                  f"answering with {self.fallback.backend_name}: {fallback.model}", 1.0)
            return fallback
        self._status("failed", primary.message)
        raise primary

    async def shutdown(self) -> None:
        self.ready = None
        if self._stopping:  # requests still being aborted on the primary end before it shuts down
            await asyncio.wait(set(self._stopping), timeout=10)
        await asyncio.gather(*(on_engine(engine.loop_thread, engine.shutdown())
                               for engine in (self.primary, self.fallback) if engine.loop_thread.alive),
                             return_exceptions=True)

    def close(self, timeout: float = 30.0) -> None:
        super().close(timeout)  # shuts both children down through their loops
        self.primary.close(timeout)
        self.fallback.close(timeout)

    def engine_died(self) -> bool:
        """Dead only when neither backend can serve: a dead primary is what the fallback is for."""
        return self.ready is not None and not (self._can_serve(self.primary) or self._can_serve(self.fallback))

    # ---- requests --------------------------------------------------------------------------

    async def abort(self, request_id: str) -> None:
        self._aborted.add(request_id)
        engine = self._live.get(request_id)
        if engine is not None:
            await on_engine(engine.loop_thread, engine.abort(request_id))

    def request_answer_now(self, request_id: str) -> None:
        engine = self._live.get(request_id)
        if engine is not None:
            engine.request_answer_now(request_id)

    def reply_so_far(self, request_id: str) -> ReplyTexts | None:
        """The texts the backend now answering keeps (after a failover: the fallback's, never both)."""
        engine = self._live.get(request_id)
        return engine.reply_so_far(request_id) if engine is not None else None

    async def generate(self, messages: Sequence[Message], sampling: SamplingConfig, request_id: str | None = None, *,
                       ignore_eos: bool = False, resume: Resume | None = None, tools: Tools | None = None,
                       tool_choice: ToolChoice | None = None) -> AsyncGenerator[EngineEvent, None]:
        """``resume`` is not supported (can_resume is False): the caller asks anew. The tools go to
        whichever backend answers, the fallback too."""
        rid = request_id or uuid.uuid4().hex[:12]
        offer: dict[str, Any] = {"tools": tools, "tool_choice": tool_choice}
        try:
            reason = ""
            if self._can_serve(self.primary):
                async with contextlib.aclosing(self._try_primary(messages, sampling, rid, ignore_eos, offer)) as events:
                    async for event in events:
                        if isinstance(event, str):  # the primary gave up before its first token
                            reason = event
                            break
                        yield event
                    else:
                        return
            else:
                reason = f"{self.primary.backend_name} is not running"
            if rid in self._aborted:
                yield Finished(rid, "abort", "", "")
                return
            log.info("request %s: failing over to %s (%s)", rid, self.fallback.backend_name, reason)
            yield BackendChosen(rid, self.fallback.backend_name, reason)
            relay = _Relay(self.fallback, messages, sampling, rid, ignore_eos, **offer)
            self._live[rid] = self.fallback
            try:
                async for event in self._drain(relay, rid):
                    yield event
            finally:
                await relay.stop(rid)
        finally:
            self._live.pop(rid, None)
            self._aborted.discard(rid)

    async def _try_primary(self, messages: Sequence[Message], sampling: SamplingConfig, rid: str,
                           ignore_eos: bool, offer: dict[str, Any]) -> AsyncGenerator[EngineEvent | str, None]:
        """The primary's events; a str instead means: it couldn't serve, for this reason."""
        relay = _Relay(self.primary, messages, sampling, rid, ignore_eos, **offer)
        self._live[rid] = self.primary
        deadline: float | None = asyncio.get_running_loop().time() + self.first_token_budget_s
        held: list[EngineEvent] = []
        try:
            while True:
                try:  # not wait_for, which on Python 3.11 drops a cancel that comes just as an item does
                    async with asyncio.timeout_at(deadline):
                        item = await relay.queue.get()
                except TimeoutError:
                    if rid in self._aborted:  # the user stopped it: let the primary end it, no fallback
                        await on_engine(self.primary.loop_thread, self.primary.abort(rid))
                        deadline = None
                        continue
                    yield f"{self.primary.backend_name} sent no first token within {self.first_token_budget_s:g} s"
                    return
                if isinstance(item, _RelayEnded):
                    yield redact(f"{self.primary.backend_name} failed: {item.error}")  # the reason is shown
                    return
                if isinstance(item, EngineErrorEvent):
                    yield f"{self.primary.backend_name} failed: {item.failure.message}"
                    return
                if isinstance(item, (ThinkingDelta, AnswerDelta, ToolCallDelta, Finished)):
                    yield BackendChosen(rid, self.primary.backend_name)
                    for event in held:
                        yield event
                    yield item
                    if isinstance(item, Finished):
                        return
                    break
                held.append(item)
            async for event in self._drain(relay, rid):
                yield event
        finally:
            # Abort what the primary still runs, without making the fallback wait for it to wind down.
            if not relay.future.done():
                task = asyncio.get_running_loop().create_task(relay.stop(rid))
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)

    async def _drain(self, relay: _Relay, rid: str) -> AsyncGenerator[EngineEvent, None]:
        """Pass a relay's events on until its Finished."""
        while True:
            item = await relay.queue.get()
            if isinstance(item, _RelayEnded):
                failure = EngineFailure(FailureKind.REQUEST_FAILED,
                                        f"{relay.engine.backend_name} failed: {item.error}", "Try again.")
                yield EngineErrorEvent(rid, failure)
                yield Finished(rid, "error", "", "")
                return
            yield item
            if isinstance(item, Finished):
                return

