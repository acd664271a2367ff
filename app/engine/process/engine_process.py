"""EngineProcess: the app's local engine, an EngineHost run in a child process (app.engine.process.process_server).

It offers the window exactly what EngineHost does (EngineBase). Calls and streams cross a pipe;
a reader thread hands what arrives to this object's own engine loop. The child is started once
and kept across engine restarts (settings changes), so vLLM is imported once per app run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import multiprocessing
import os
import signal
import threading
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Sequence
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from typing import Any, TypeVar, cast

import psutil

from app.core.chat.images import ImageRefused
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.base import SHUTDOWN_GRACE_S, EngineBase, EventSink, Message
from app.engine.errors import EngineFailure, FailureKind, engine_stopped
from app.engine.events import EngineErrorEvent, EngineEvent, EngineReady, Finished
from app.engine.local import vllm_logging
from app.engine.machine.orphans import owner_environment, record_engine_processes, same_process
from app.engine.process import process_protocol as protocol
from app.engine.process import process_server
from app.engine.reply.reasoning import ReplyTexts
from app.engine.requests import MessageSpec, Resume, ToolChoice, ToolChoiceSpec, Tools, ToolSpec

log = logging.getLogger(__name__)
T = TypeVar("T")
ChildMain = Callable[[Any], None]  # the child's main, given its end of the pipe


class EngineProcess(EngineBase):
    """The window's handle on an EngineHost that runs in a child process."""

    can_resume = True

    def __init__(self, on_status: EventSink | None = None, *, child_main: ChildMain | None = None) -> None:
        """``child_main`` is the child's entry (picklable: a module-level function); a benchmark passes its own."""
        super().__init__(on_status)
        self._child_main = child_main or process_server.serve
        self._process: Any = None  # multiprocessing's SpawnProcess
        self._conn: Any = None
        self._send_lock = threading.Lock()
        self._calls = PendingCalls()
        self._streams: dict[str, asyncio.Queue[EngineEvent | None]] = {}  # None: the child is gone
        self._family: set[tuple[int, float]] = set()  # (pid, start time): every child's engine processes
        self._engine_dead = False
        self._starts = 0  # start requests sent to the current child: its death reports name one
        self._process_gone = False
        self._spawn_lock = threading.Lock()
        self._closed = False
        self._handlers: protocol.Handlers = {
            protocol.Event: self._on_event,
            protocol.Status: lambda message: self._on_status(message.event),
            protocol.Result: self._on_result,
            protocol.Failure: self._on_failure,
            protocol.EngineDied: self._on_engine_died,
        }

    @property
    def pid(self) -> int | None:
        """The engine process's pid (vLLM's engine client; EngineCore is its child), once started."""
        return self._process.pid if self._process is not None else None

    # ---- the pipe -----------------------------------------------------------------------------

    def _ensure_process(self) -> None:
        with self._spawn_lock:  # close() waits for a spawn under way, and none starts after it
            if self._closed:
                raise EngineFailure(FailureKind.NOT_READY, "Nalar is closing.", "Start Nalar again.")
            if self._process is not None and self._process.is_alive() and not self._process_gone:
                return
            self._status("loading", "starting the engine process…", 0.01)
            if self._conn is not None:
                self._conn.close()  # a dead child's end; its reader thread has seen EOF
            process, ours = _spawn_child(self._child_main)
            self._process, self._conn, self._process_gone, self._starts = process, ours, False, 0
            threading.Thread(target=self._read, args=(ours,), name="nalar-engine-pipe", daemon=True).start()
            log.info("engine process %d started", process.pid)

    def _send(self, message: protocol.ToEngineProcess | protocol.Call[Any]) -> None:
        with self._send_lock:
            if self._conn is None or self._process_gone:
                raise engine_stopped()
            try:
                self._conn.send(message)
            except (OSError, EOFError, ValueError) as exc:
                raise engine_stopped() from exc

    def _read(self, conn: Any) -> None:
        """The reader thread: everything from the child goes to the engine loop, in order."""
        try:
            while True:
                message = conn.recv()
                self.loop_thread.call_soon(self.receive, message)
        except (EOFError, OSError):
            with contextlib.suppress(RuntimeError):  # the loop is already closed at app exit
                self.loop_thread.call_soon(self._child_gone, conn)

    # ---- this side's table: what the child sends, on the engine loop -------------------------------

    def receive(self, message: protocol.ToWindow) -> None:
        """On the engine loop: one message from the child, to its handler in this side's table."""
        protocol.dispatch(self._handlers, message)

    def _on_event(self, message: protocol.Event) -> None:
        if (queue := self._streams.get(message.request_id)) is not None:
            queue.put_nowait(message.event)

    def _on_result(self, message: protocol.Result[Any]) -> None:
        self._calls.answer(message.call, lambda future: future.set_result(message.value))

    def _on_failure(self, message: protocol.Failure) -> None:
        self._calls.answer(message.call, lambda future: future.set_exception(message.failure))

    def _on_engine_died(self, message: protocol.EngineDied) -> None:
        if message.start == self._starts:  # not about an engine since replaced
            self._engine_dead = True

    def _child_gone(self, conn: Any) -> None:
        if conn is not self._conn:
            return  # an earlier child's reader, ending after we replaced it
        self._process_gone = True
        self._calls.fail_all(engine_stopped)
        for queue in self._streams.values():
            queue.put_nowait(None)

    async def _call(self, message: protocol.Call[T]) -> T:
        call, future = self._calls.open()
        try:
            self._send(dataclasses.replace(message, call=call))
        except EngineFailure:
            self._calls.answer(call, lambda _: None)
            raise
        return cast(T, await future)  # the child answers a Call[T] with a Result[T]

    async def call(self, message: protocol.Call[T]) -> T:
        """A call the child's entry added to its table (a benchmark's: bench_entry); on the engine loop."""
        return await self._call(message)

    # ---- EngineBase ---------------------------------------------------------------------------

    async def start(self, config: EngineConfig, *, kv_block_size: int | None = None) -> EngineReady:
        if self.ready is not None:
            await self.shutdown()
        await asyncio.get_running_loop().run_in_executor(None, self._ensure_process)
        self._engine_dead = False
        self._starts += 1
        self.ready = await self._call(protocol.Start(config=config, kv_block_size=kv_block_size))
        record_engine_processes()  # the child and its EngineCore, should this process die
        # Kept to end them at close even if the child dies first: its EngineCore can outlive it (vllm#55510).
        self._family |= _marks(self._process.pid)
        return self.ready

    async def generate(self, messages: Sequence[Message], sampling: SamplingConfig, request_id: str | None = None, *,
                       ignore_eos: bool = False, resume: Resume | None = None, tools: Tools | None = None,
                       tool_choice: ToolChoice | None = None) -> AsyncGenerator[EngineEvent, None]:
        rid = request_id or uuid.uuid4().hex[:12]
        queue: asyncio.Queue[EngineEvent | None] = asyncio.Queue()
        self._streams[rid] = queue
        finished = False
        try:
            try:
                self._send(_generate_message(rid, messages, sampling, ignore_eos, resume, tools, tool_choice))
            except EngineFailure as failure:
                finished = True
                yield EngineErrorEvent(rid, failure)
                yield Finished(rid, "error", "", "")
                return
            texts = _reply_image(resume)
            with self.keeping(rid, texts):
                while not finished:
                    event = await queue.get()
                    if event is None:  # the child is gone: end the reply as EngineHost does, partial text kept
                        finished = True
                        yield EngineErrorEvent(rid, engine_stopped())
                        yield Finished(rid, "error", texts.thinking_text, texts.answer_text)
                        return
                    texts.follow(event)
                    finished = isinstance(event, Finished)
                    yield event
        finally:
            self._streams.pop(rid, None)
            if not finished:  # the caller stopped listening (cancelled): the child stops the request too
                with contextlib.suppress(EngineFailure):
                    self._send(protocol.Cancel(rid))

    async def abort(self, request_id: str) -> None:
        with contextlib.suppress(EngineFailure):
            await self._call(protocol.Abort(request_id=request_id))

    def request_answer_now(self, request_id: str) -> None:
        """Thread-safe."""
        with contextlib.suppress(EngineFailure):
            self._send(protocol.AnswerNow(request_id))

    async def shutdown(self) -> None:
        """Stop the engine; the process stays for the next start. Safe to call twice."""
        was_ready, self.ready = self.ready, None
        if was_ready is None or self._process_gone:
            return
        with contextlib.suppress(EngineFailure):
            await self._call(protocol.Shutdown())
        record_engine_processes()

    def engine_died(self) -> bool:
        """Thread-safe read: the child's engine stopped by itself, or the child itself is gone."""
        return self.ready is not None and (self._engine_dead or self._process_gone)

    def close(self, timeout: float = SHUTDOWN_GRACE_S) -> None:
        """From any thread but the engine loop: end the engine, the child and anything it started.

        Wherever a start is (not spawned yet, importing vLLM, EngineCore starting, weights loading), it is
        abandoned, not awaited: the child gets ``timeout`` seconds to end by itself, then its process group
        (the child, EngineCore and its workers, re-parented or not) gets SIGKILL.
        """
        with self._spawn_lock:
            self._closed = True
            process = self._process
        if process is not None:
            with contextlib.suppress(EngineFailure):
                self._send(protocol.Exit())
            _end_child(process, self._family, timeout)
            self._process_gone = True
            if self._conn is not None:
                self._conn.close()
            record_engine_processes()
        if self.loop_thread.alive:
            self.loop_thread.stop()


class PendingCalls:
    """Calls sent to the child and not answered yet: call id → the future its caller awaits (engine loop)."""

    def __init__(self) -> None:
        self._futures: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)

    def open(self) -> tuple[int, asyncio.Future[Any]]:
        call = next(self._ids)
        future = self._futures[call] = asyncio.get_running_loop().create_future()
        return call, future

    def answer(self, call: int, settle: Callable[[asyncio.Future[Any]], None]) -> None:
        """``settle`` the call's future, once: a late or unknown answer is dropped."""
        future = self._futures.pop(call, None)
        if future is not None and not future.done():
            settle(future)

    def fail_all(self, failure: Callable[[], BaseException]) -> None:
        futures, self._futures = self._futures, {}
        for future in futures.values():
            if not future.done():
                future.set_exception(failure())


def _generate_message(rid: str, messages: Sequence[Message], sampling: SamplingConfig, ignore_eos: bool,
                      resume: Resume | None, tools: Tools | None, tool_choice: ToolChoice | None) -> protocol.Generate:
    """generate()'s arguments as the pipe's typed message (OpenAI's shapes become specs here)."""
    try:
        specs = tuple(MessageSpec.from_openai(m) for m in messages)
    except ImageRefused as refused:  # the window and the API read images before; this is a caller's bug
        raise EngineFailure(FailureKind.BAD_MESSAGES, f"An image in the messages can't be sent: {refused.problem}",
                            refused.fix or "Send the question without it.") from refused
    return protocol.Generate(rid, specs, sampling, ignore_eos=ignore_eos,
                             resume=resume, tools=tuple(ToolSpec.from_openai(t) for t in tools or ()),
                             tool_choice=ToolChoiceSpec.from_openai(tool_choice) if tool_choice is not None else None)


def _reply_image(resume: Resume | None) -> ReplyTexts:
    """The child's ReplyStream keeps the texts, and they die with it: this image of them (its events, its loop
    cuts, the resumed text) is what the window reads and what a dead child's reply keeps."""
    texts = ReplyTexts()
    if resume is not None:
        texts.start_from(resume.thinking, resume.answer if resume.phase == "answer" else "")
    return texts


def _spawn_child(child_main: ChildMain) -> tuple[Any, Connection]:
    """A spawned child running ``child_main`` on its end of a new pipe; ours is returned with it."""
    context = multiprocessing.get_context("spawn")  # fork would copy Qt and this process's threads
    ours, theirs = context.Pipe()
    os.environ.update(owner_environment())  # marks the child as ours, should it outlive us (orphans)
    process = context.Process(target=child_main, args=(theirs,), name="nalar-engine")
    with vllm_logging.stderr_to_engine_log():  # the resource tracker starts with the first child
        resource_tracker.ensure_running()
    process.start()
    theirs.close()  # only the child holds its end now: our exit is its EOF
    return process, ours


def _end_child(process: Any, family: set[tuple[int, float]], timeout: float) -> None:
    """After Exit was sent: ``timeout`` seconds for the child to end by itself, then SIGKILL to its process
    group, then to any of ``family`` (earlier children's processes, or any that left the group)."""
    exited = _wait_for_exit(process.pid, timeout)
    if not exited:  # the designed path when vLLM's own shutdown is slow: not a problem to warn about
        log.info("the engine process did not end in %.0f s; killing its process group", timeout)
    if exited is not None:  # not reaped yet, so its pid (the group's id) is still ours
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # no such group: the child had not made it yet
        process.kill()
    # Earlier children's processes (one replaced after it died), and any that left the group.
    left = [proc for pid, created in _marks(process.pid) | family if (proc := same_process(pid, created))]
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    process.join(5)
    psutil.wait_procs(left, timeout=5)


def _wait_for_exit(pid: int, timeout: float) -> bool | None:
    """Wait until our child ``pid`` has exited, without reaping it. None: it was reaped already."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return None
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _marks(pid: int) -> set[tuple[int, float]]:
    """(pid, start time) of a process's descendants now: enough to end them later, never a reused pid."""
    marks: set[tuple[int, float]] = set()
    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return marks
    for proc in descendants:
        with contextlib.suppress(psutil.Error):
            marks.add((proc.pid, proc.create_time()))
    return marks
