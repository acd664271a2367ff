"""The engine process: an EngineHost in a child of the window, driven over a pipe by EngineProcess.

Why a process: building vLLM's engine client loads the tokenizer (Rust calls of 200–300 ms that
hold the GIL), so in the window's process the window froze while the engine loaded. Here nothing
the window runs shares this process's GIL.

Messages are tuples. From the window: ("start", call, config, kv_block_size), ("generate", rid,
messages, sampling, ignore_eos, resume), ("cancel", rid), ("abort", call, rid), ("answer_now", rid),
("shutdown", call), ("exit",), and for `nalar bench ui` only ("measure_raw", call, tokens, index,
messages): raw AsyncLLM's tok/s on the same engine. To the window: ("result", call, value), ("failure", call, failure),
("event", rid, event), ("status", event), ("engine_died", starts): the engine of the ``starts``-th start died.

The window's end closing (it exited or was killed) ends the engine and this process: vLLM can
leave EngineCore running when its parent dies (vllm#55510), so we never leave that to chance.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from app.engine.errors import EngineFailure, FailureKind

log = logging.getLogger(__name__)
DEATH_POLL_S = 0.5


class _Outbox:
    """One writer at a time: the engine loop's events and this thread's replies share the pipe."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            try:
                self._conn.send(message)
            except (OSError, EOFError):  # the window is gone; the main loop sees EOF and ends
                pass


def _event_sender(out: _Outbox, rid: str) -> Callable[[Any], None]:
    return lambda event: out.send(("event", rid, event))


def _forget(streams: dict[str, Any], rid: str) -> Callable[[Any], None]:
    return lambda _: streams.pop(rid, None)


def _exit_cleanly(signum: int, frame: Any) -> None:
    raise SystemExit(0)  # in the main thread: the `finally` below ends the engine first


def serve(conn: Connection) -> None:
    """The child's main: run requests until the window says exit or its end of the pipe closes."""
    from app.commands.cli import configure_logging
    from app.engine.host import EngineHost

    configure_logging(console=False)
    # Ctrl+C in a terminal reaches the whole process group: the window closes, and tells us to exit.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_cleanly)  # a plain SIGTERM would leave EngineCore running
    out = _Outbox(conn)
    host = EngineHost(on_status=lambda event: out.send(("status", event)))
    streams: dict[str, concurrent.futures.Future[Any]] = {}
    died_reported = False
    starts = 0  # tells the window which engine died: a report about the one before a restart is stale

    def reply_when_done(call: int, future: concurrent.futures.Future[Any]) -> None:
        def done(result: concurrent.futures.Future[Any]) -> None:
            error = result.exception()
            if error is None:
                out.send(("result", call, result.result()))
            elif isinstance(error, EngineFailure):
                out.send(("failure", call, error))
            else:
                out.send(("failure", call, EngineFailure(FailureKind.ENGINE_START_FAILED,
                                                         f"The engine process failed: {error}", "Restart Nalar.")))
        future.add_done_callback(done)

    try:
        while True:
            if not conn.poll(DEATH_POLL_S):
                if not died_reported and host.engine_died():
                    died_reported = True
                    out.send(("engine_died", starts))
                continue
            message = conn.recv()
            kind = message[0]
            if kind == "exit":
                break
            if kind == "start":
                _, call, config, block_size = message
                died_reported, starts = False, starts + 1
                reply_when_done(call, host.loop_thread.submit(host.start(config, kv_block_size=block_size)))
            elif kind == "generate":
                _, rid, messages, sampling, ignore_eos, resume = message
                streams[rid] = host.loop_thread.submit(host.stream_to(
                    _event_sender(out, rid), messages, sampling, rid, ignore_eos=ignore_eos, resume=resume))
                streams[rid].add_done_callback(_forget(streams, rid))
            elif kind == "cancel":
                if (stream := streams.get(message[1])) is not None:
                    stream.cancel()  # the engine loop's task is cancelled: vLLM aborts the request
            elif kind == "abort":
                reply_when_done(message[1], host.loop_thread.submit(host.abort(message[2])))
            elif kind == "answer_now":
                host.request_answer_now(message[1])
            elif kind == "measure_raw":
                from app.commands.bench import raw_run

                _, call, tokens, index, messages = message
                reply_when_done(call, host.loop_thread.submit(
                    raw_run(host, tokens, index, messages, include_prefill=True)))
            elif kind == "shutdown":
                reply_when_done(message[1], host.loop_thread.submit(host.shutdown()))
    except (EOFError, OSError):
        log.warning("the window's end of the engine pipe closed; ending the engine")
    finally:
        host.close()
        conn.close()
        logging.shutdown()
        # Skip the interpreter's teardown: vLLM is shut down, and tearing down its extension modules only
        # prints leak reports (nanobind's, for triton) and takes time.
        os._exit(0)
