"""One runner for the window's background work, in the shape of Anki's ``aqt/operations``.

An operation runs a blocking function on a worker thread (``run_blocking``) or a coroutine on a loop thread
(``run_on``); its ``success`` and ``failure`` callbacks run on the Qt main thread. Callers attach them right
after starting it, on the main thread: results always arrive through a queued signal, so none can land before.

A result that arrives after its owner (the ``parent`` QObject: a dialog, a window) was deleted, or after
``cancel()``, is dropped. A failure is always logged; one without a ``failure`` callback reaches the user as
an ``OperationError`` through ``runner().unhandled``, which the window shows. An operation can also be awaited
from the UI loop, for work that runs in steps; the awaiting code then gets the exception itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, Qt, QThread, Signal

from app.core.loop_thread import LoopThread
from app.core.models.token_count import TokenCounter

log = logging.getLogger(__name__)
T = TypeVar("T")
LOG_FIX = "See the log folder (Help → Open log folder) for the details."


@dataclass(frozen=True)
class OperationError:
    """A background job's failure, for the user: what was being done, why it failed, and what to do."""

    what: str
    message: str
    fix: str = LOG_FIX

    @classmethod
    def of(cls, what: str, exc: BaseException) -> OperationError:
        return cls(what, f"{what} failed: {exc or type(exc).__name__}")


class Operation(Generic[T]):
    """One background job. Build it with ``run_blocking`` or ``run_on``, then chain ``.success()``/``.failure()``."""

    def __init__(self, what: str, future: concurrent.futures.Future[T], parent: QObject | None,
                 thread: threading.Thread | None = None) -> None:
        self.what = what
        self.thread = thread  # a blocking job's worker; None for a coroutine on a loop thread
        self._future = future
        self._parent = parent
        self._on_success: list[Callable[[T], object]] = []
        self._on_failure: list[Callable[[Exception], object]] = []
        self._dropped = False
        self._awaited = False
        self.settled = False  # its callbacks ran, or it was dropped (on the main thread)

    def success(self, callback: Callable[[T], object]) -> Operation[T]:
        self._on_success.append(callback)
        return self

    def failure(self, callback: Callable[[Exception], object]) -> Operation[T]:
        self._on_failure.append(callback)
        return self

    @property
    def running(self) -> bool:
        return not self._future.done() or (self.thread is not None and self.thread.is_alive())

    def cancel(self) -> None:
        """Drop the result; a coroutine is cancelled on its loop too (a blocking function runs to its end)."""
        self._dropped = True
        self._future.cancel()

    def wait(self, timeout: float) -> bool:
        """Block until the work has ended (its worker thread too); True if it did within ``timeout``."""
        try:
            self._future.exception(timeout)
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
            pass
        if self.thread is not None:
            self.thread.join(timeout)
        return not self.running

    def __await__(self) -> Generator[Any, None, T]:
        self._awaited = True
        return asyncio.wrap_future(self._future).__await__()

    def _settle(self) -> None:
        """On the main thread, once the work has ended."""
        if self.settled:
            return
        if self.thread is not None:
            self.thread.join(1.0)  # it has set its result and is returning: settled means no thread is left
        self.settled = True
        owner_gone = self._parent is not None and not shiboken6.isValid(self._parent)
        if self._dropped or owner_gone or self._future.cancelled():
            log.debug("%s: result dropped (%s)", self.what, "owner gone" if owner_gone else "cancelled")
            return
        exc = self._future.exception()
        if exc is None:
            result = self._future.result()
            for callback in self._on_success:
                callback(result)
            return
        log.warning("%s failed", self.what, exc_info=exc)
        if not isinstance(exc, Exception):
            return
        if self._on_failure:
            for fail in self._on_failure:
                fail(exc)
        elif not self._awaited:
            runner().unhandled.emit(OperationError.of(self.what, exc))


class Runner(QObject):
    """The one runner: hands every operation's outcome to the main thread and keeps the live ones."""

    unhandled = Signal(object)  # OperationError: a failure no caller handles, for the window to show
    _ended = Signal(object)     # Operation, from whichever thread finished it

    def __init__(self) -> None:
        super().__init__()
        self.live: set[Operation[Any]] = set()
        self._ended.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    def start(self, operation: Operation[T]) -> Operation[T]:
        self.live.add(operation)
        operation._future.add_done_callback(lambda _future: self._ended.emit(operation))
        if operation.thread is not None:
            operation.thread.start()
        return operation

    def _deliver(self, operation: Operation[Any]) -> None:
        self.live.discard(operation)
        operation._settle()

    def wait_idle(self, timeout: float) -> bool:
        """Block until every live operation's work has ended (the window closing); True if all did."""
        return all(operation.wait(timeout) for operation in list(self.live))


_RUNNER: Runner | None = None


def runner() -> Runner:
    """The process's runner, made on the main thread on first use."""
    global _RUNNER
    if _RUNNER is None or not shiboken6.isValid(_RUNNER):
        app = QCoreApplication.instance()
        assert app is not None and QThread.currentThread() is app.thread(), "operations start on the main thread"
        _RUNNER = Runner()
    return _RUNNER


def run_blocking(what: str, work: Callable[[], T], parent: QObject | None = None) -> Operation[T]:
    """Run ``work`` on a worker thread of its own. ``work`` must not touch widgets."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to the main thread; the worker itself never raises
            future.set_exception(exc)

    thread = threading.Thread(target=target, name=f"nalar-op: {what}", daemon=True)
    return runner().start(Operation(what, future, parent, thread))


def run_on(loop_thread: LoopThread, what: str, coro: Coroutine[Any, Any, T],
           parent: QObject | None = None) -> Operation[T]:
    """Run ``coro`` on ``loop_thread``'s loop (the engine's, the tool servers')."""
    return runner().start(Operation(what, loop_thread.submit(coro), parent))


# ---- token counts: the runner's keyed use ----------------------------------------------------------------------
# Token counts the window shows (a file's chip, the keep-thinking switches, the context gauge, a send's fit) are
# counted off the GUI thread when they are not cheap. Counting the tokens of a 1 MB attachment held the window 0.8 s,
# those of a reopened chat's long answer 1 s, and the first count read tokenizer.json (0.2 s), all on the GUI thread.
# A view asks ``TokenCounts.counted``: texts cheap to count (``TokenCounter.cheap``) are counted at once; others go to
# a worker, the view shows "counting tokens…", and its ``then`` runs once they are counted, to draw again. The newest
# ask of a kind (``key``) replaces an older one still running, whose result is dropped.
COUNTING = "counting tokens…"


class TokenCounts(QObject):
    """One view's counts under way, by kind."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.asked: dict[str, tuple[Operation[list[int]], TokenCounter, list[str]]] = {}
        self._then: dict[str, Callable[[], object]] = {}
        self._settling: set[str] = set()

    def counted(self, counter: TokenCounter, key: str, texts: Sequence[str], then: Callable[[], object]) -> bool:
        """Whether every text of ``texts`` is counted now (``counter.known`` gives each); if not, they are counted
        on a worker and ``then`` runs on the GUI thread after, unless a newer ask of ``key`` for other texts came
        meanwhile. The same texts asked again while they are counted wait for that count (a view drawn again
        meanwhile started a second worker on the same 1 MB)."""
        if key in self._settling:  # its ``then`` asks again: no second round (texts the memory dropped meanwhile,
            return True            # past its bound, stay "counting…" rather than be counted for ever)
        if counter.count_if_cheap(texts):
            self._drop(key)
            return True
        self._then[key] = then
        wanted = list(texts)
        if key in self.asked and self.asked[key][1] == counter and self.asked[key][2] == wanted:
            return False
        self._drop(key)
        operation = run_blocking(f"Counting tokens ({key})", lambda: counter.count_all(wanted), parent=self)
        self.asked[key] = (operation, counter, wanted)

        def done(_counts: list[int]) -> None:
            if key in self.asked and self.asked[key][0] is operation:
                del self.asked[key]
                self._settling.add(key)
                try:
                    self._then.pop(key)()
                finally:
                    self._settling.discard(key)

        operation.success(done).failure(lambda exc: self._failed(key, operation, exc))
        return False

    @property
    def counting(self) -> bool:
        return bool(self.asked)

    def _drop(self, key: str) -> None:
        if (older := self.asked.pop(key, None)) is not None:
            older[0].cancel()  # its counts are remembered all the same; only its ``then`` is dropped

    def _failed(self, key: str, operation: Operation[list[int]], exc: Exception) -> None:
        """The tokenizer can't be read or encode: the counts stay "counting…", said in the log (the engine, which
        reads the same tokenizer, fails louder)."""
        if key in self.asked and self.asked[key][0] is operation:
            del self.asked[key]
        log.warning("tokens can't be counted (%s): %s", key, exc)
