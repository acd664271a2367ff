"""Benchmarks' own way into the engine: raw AsyncLLM runs, and the engine process's benchmark entry.

`nalar bench ui` compares the window's tok/s with raw AsyncLLM on the same engine, so the raw run must
happen in the engine process. It does not ride the production protocol: the bench starts the child
with ``serve`` below, which adds ``MeasureRaw`` to the child's table, and asks through ``measure_raw``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from app.core.chat.conversation import Message
from app.engine.process import process_protocol as protocol
from app.engine.process import process_server
from app.engine.process.engine_process import EngineProcess
from app.engine.requests import MessageSpec


async def raw_run(host: Any, tokens: int, index: int, messages: list[Message],
                  include_prefill: bool = False) -> float:
    """tok/s straight from AsyncLLM.generate on an EngineHost's engine, no Nalar code in the loop.

    By default the rate counts the decode after the first token; ``include_prefill`` times the
    whole request instead, from the call to the last token, as a user waits for it.
    """
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    ids, _ = host.fit_prompt(messages, reserve=tokens, opened_think=False)
    params = SamplingParams(max_tokens=tokens, temperature=0.6, top_p=0.95, ignore_eos=True,
                            output_kind=RequestOutputKind.DELTA)
    called = time.perf_counter()
    first = last = None
    count = 0
    async for output in host.raw_generate(ids, params, f"raw-{index}"):
        now = time.perf_counter()
        n = len(output.outputs[0].token_ids)
        if n and first is None and not include_prefill:
            first = now
            continue  # the first token ends the prefill; rate counts the decode after it
        count += n
        last = now
    assert first is not None or include_prefill
    assert last is not None, "the engine produced no tokens"
    return count / (last - (called if include_prefill else first))  # type: ignore[operator]


@dataclass(frozen=True, kw_only=True)
class MeasureRaw(protocol.Call[float]):
    """Raw AsyncLLM's tok/s for this request, prefill included, on the engine in the child."""

    tokens: int
    index: int
    messages: tuple[MessageSpec, ...]


def _bench_handlers(server: process_server.EngineServer) -> protocol.Handlers:
    def measure_raw(message: MeasureRaw) -> None:
        server.reply_when_done(message.call, server.host.loop_thread.submit(
            raw_run(server.host, message.tokens, message.index, [m.as_openai() for m in message.messages],
                    include_prefill=True)))

    return {MeasureRaw: measure_raw}


def serve(conn: Connection) -> None:
    """The benchmark child's main: the production server, plus MeasureRaw."""
    process_server.serve(conn, _bench_handlers)


class BenchEngineProcess(EngineProcess):
    """The app's engine process, started through the benchmark entry."""

    def __init__(self) -> None:
        super().__init__(child_main=serve)

    async def measure_raw(self, tokens: int, index: int, messages: list[Message]) -> float:
        specs = tuple(MessageSpec.from_openai(m) for m in messages)
        return await self.call(MeasureRaw(tokens=tokens, index=index, messages=specs))
