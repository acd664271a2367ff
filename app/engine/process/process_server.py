"""The engine process: an EngineHost in a child of the window, driven over a pipe by EngineProcess.

Why a process: building vLLM's engine client loads the tokenizer (Rust calls of 200–300 ms that
hold the GIL), so in the window's process the window froze while the engine loaded. Here nothing
the window runs shares this process's GIL.

The messages are app.engine.process.process_protocol's; ``EngineServer.handlers`` is this side's table.

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

from app.engine.base import EngineBase
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import EngineErrorEvent, EngineEvent, Finished, StatusChanged
from app.engine.process import process_protocol as protocol

log = logging.getLogger(__name__)
DEATH_POLL_S = 0.5

# A benchmark's entry (app.engine.process.bench_entry) adds handlers for its own messages: given the server, a table.
Extensions = Callable[["EngineServer"], protocol.Handlers]


class Outbox:
    """One writer at a time: the engine loop's events and the main thread's replies share the pipe."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def send(self, message: protocol.ToWindow) -> None:
        with self._lock:
            try:
                self._conn.send(message)
            except (OSError, EOFError):  # the window is gone; the main loop sees EOF and ends
                pass


class EngineServer:
    """Runs the window's messages on an EngineHost (``host``) and sends back what they produce."""

    def __init__(self, host: EngineBase, out: Outbox, extensions: Extensions | None = None) -> None:
        self.host = host
        self.out = out
        self.starts = 0  # Start messages so far: the engine reports name theirs (a stale one is ignored)
        self.exiting = False
        self._start: concurrent.futures.Future[Any] | None = None
        self._died_reported = False
        self._streams: dict[str, concurrent.futures.Future[Any]] = {}
        self.handlers: dict[type, Callable[[Any], None]] = {
            protocol.Start: self.start,
            protocol.Generate: self.generate,
            protocol.Cancel: self.cancel,
            protocol.Abort: self.abort,
            protocol.AnswerNow: self.answer_now,
            protocol.Shutdown: self.shutdown,
            protocol.Exit: self.exit,
        }
        if extensions is not None:
            self.handlers.update(extensions(self))

    def reply_when_done(self, call: int, future: concurrent.futures.Future[Any]) -> None:
        """Answer call ``call`` with the future's result, or a typed failure."""
        def done(result: concurrent.futures.Future[Any]) -> None:
            if result.cancelled():  # the engine loop stopped under it: this process is ending
                error: BaseException | None = EngineFailure(FailureKind.ENGINE_DIED, "The engine process is ending.",
                                                            "Restart the engine.")
            else:
                error = result.exception()
            if error is None:
                self.out.send(protocol.Result(call, result.result()))
            elif isinstance(error, EngineFailure):
                self.out.send(protocol.Failure(call, error))
            else:
                self.out.send(protocol.Failure(call, EngineFailure(
                    FailureKind.ENGINE_START_FAILED, f"The engine process failed: {error}", "Restart Nalar.")))
        future.add_done_callback(done)

    def check_engine(self) -> None:
        """Between messages: report, once per start, an engine that stopped by itself."""
        if not self._died_reported and self.host.engine_died():
            self._died_reported = True
            self.out.send(protocol.EngineDied(start=self.starts))

    # ---- the table's handlers ---------------------------------------------------------------------

    def start(self, message: protocol.Start) -> None:
        self._died_reported, self.starts = False, self.starts + 1
        self._start = self.host.loop_thread.submit(self.host.start(message.config, kv_block_size=message.kv_block_size))
        self.reply_when_done(message.call, self._start)

    @property
    def starting(self) -> bool:
        """An engine start is under way (vLLM's import or load blocks the engine loop meanwhile)."""
        return self._start is not None and not self._start.done()

    def generate(self, message: protocol.Generate) -> None:
        """The pipe's typed messages and tools become OpenAI's shape again here, where the host reads them."""
        rid = message.request_id
        choice = message.tool_choice.as_openai() if message.tool_choice is not None else None
        stream = self.host.loop_thread.submit(self.host.stream_to(
            _event_sender(self.out, rid), [m.as_openai() for m in message.messages], message.sampling, rid,
            ignore_eos=message.ignore_eos, resume=message.resume, tools=[t.as_openai() for t in message.tools] or None,
            tool_choice=choice))
        self._streams[rid] = stream
        stream.add_done_callback(lambda done: self._stream_ended(rid, done))

    def _stream_ended(self, rid: str, stream: concurrent.futures.Future[Any]) -> None:
        """A stream that raised never sent its Finished, and the window would wait for it for ever: end the
        reply there as a typed failure, and log why."""
        self._streams.pop(rid, None)
        if stream.cancelled() or (error := stream.exception()) is None:
            return
        log.error("request %s failed before its end", rid, exc_info=error)
        failure = error if isinstance(error, EngineFailure) else EngineFailure(
            FailureKind.REQUEST_FAILED, f"The request failed: {type(error).__name__}: {str(error)[:200]}",
            "Try again; details are in nalar.log.")
        self.out.send(protocol.Event(rid, EngineErrorEvent(rid, failure)))
        self.out.send(protocol.Event(rid, Finished(rid, "error", "", "")))

    def cancel(self, message: protocol.Cancel) -> None:
        if (stream := self._streams.get(message.request_id)) is not None:
            stream.cancel()  # the engine loop's task is cancelled: vLLM aborts the request

    def abort(self, message: protocol.Abort) -> None:
        self.reply_when_done(message.call, self.host.loop_thread.submit(self.host.abort(message.request_id)))

    def answer_now(self, message: protocol.AnswerNow) -> None:
        self.host.request_answer_now(message.request_id)

    def shutdown(self, message: protocol.Shutdown) -> None:
        self.reply_when_done(message.call, self.host.loop_thread.submit(self.host.shutdown()))

    def exit(self, message: protocol.Exit) -> None:
        self.exiting = True

    def cancel_streams(self) -> None:
        """Before the engine closes: its loop stops, and a reply still streaming would be dropped mid-way."""
        for stream in list(self._streams.values()):
            stream.cancel()


def _event_sender(out: Outbox, rid: str) -> Callable[[EngineEvent], None]:
    return lambda event: out.send(protocol.Event(rid, event))


def _exit_cleanly(signum: int, frame: Any) -> None:
    raise SystemExit(0)  # in the main thread: the `finally` below ends the engine first


def end_process_group() -> None:
    """End this process and everything it started, at once: the start's vLLM import or EngineCore included.

    One SIGKILL to the group (serve() made this process its leader), so nothing spawned a moment before is
    missed, and no EngineCore is left to be re-parented to init (vllm#55510).
    """
    log.info("ending while the engine starts: ending the engine process group")
    logging.shutdown()
    os.killpg(os.getpgrp(), signal.SIGKILL)


def run(conn: Connection, host: EngineBase, extensions: Extensions | None = None,
        abandon_start: Callable[[], None] | None = None) -> None:
    """Read and dispatch the window's messages until Exit or the pipe closes; then close ``host``.

    Ending while a start is under way calls ``abandon_start`` instead (when given): a closing window must not
    wait for the load, which blocks the engine loop for tens of seconds.
    """
    out = Outbox(conn)
    host.set_status_sink(lambda event: out.send(protocol.Status(event)) if isinstance(event, StatusChanged) else None)
    server = EngineServer(host, out, extensions)
    try:
        while not server.exiting:
            if conn.poll(DEATH_POLL_S):
                protocol.dispatch(server.handlers, conn.recv())
            else:
                server.check_engine()
    except (EOFError, OSError):
        log.warning("the window's end of the engine pipe closed; ending the engine")
    finally:
        if server.starting and abandon_start is not None:
            abandon_start()
        server.cancel_streams()
        host.close()
        conn.close()


def serve(conn: Connection, extensions: Extensions | None = None) -> None:
    """The child's main: run requests until the window says exit or its end of the pipe closes."""
    from app.core.settings.logs import configure_logging
    from app.engine.local import vllm_logging
    from app.engine.local.host import EngineHost

    vllm_logging.configure_vllm_logging()  # rotates the engine log first: the output below keeps the file it opens
    vllm_logging.send_output_to_engine_log()
    # A process group of our own: the window can end this process and all it started with one killpg,
    # even EngineCore once re-parented; and a terminal's Ctrl+C reaches the window only, which then closes.
    os.setpgid(0, 0)
    configure_logging(console=False)
    logging.captureWarnings(True)  # FutureWarnings and the like: into nalar.log, with the rest of ours
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_cleanly)  # a plain SIGTERM would leave EngineCore running
    try:
        run(conn, EngineHost(), extensions, abandon_start=end_process_group)
    finally:
        logging.shutdown()
        # Skip the interpreter's teardown: vLLM is shut down, and tearing down its extension modules only
        # prints leak reports (nanobind's, for triton) and takes time.
        os._exit(0)
