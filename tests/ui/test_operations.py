"""The one runner: blocking work on a worker thread, coroutines on a loop thread, results on the GUI thread."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
import shiboken6
from PySide6.QtCore import QObject

from app.core.loop_thread import LoopThread
from app.ui.controllers.operations import OperationError, run_blocking, run_on, runner


@pytest.fixture
def loop_thread():
    thread = LoopThread("test-ops")
    yield thread
    thread.stop()
    assert not thread.alive


def test_a_blocking_result_and_failure_arrive_on_the_gui_thread(qtbot) -> None:
    """Bug caught: a callback run on the worker thread (a widget touched off the GUI thread, which crashes
    Qt at random); a failure swallowed with no callback told."""
    seen: list[tuple[str, object, bool]] = []
    gui = threading.current_thread()

    def record(kind: str):
        return lambda value: seen.append((kind, value, threading.current_thread() is gui))

    worked = run_blocking("adding", lambda: 2 + 3).success(record("ok")).failure(record("failed"))
    failed = run_blocking("dividing", lambda: 1 // 0).success(record("ok")).failure(record("failed"))
    qtbot.waitUntil(lambda: worked.settled and failed.settled, timeout=5000)
    assert ("ok", 5, True) in seen
    [failure] = [entry for entry in seen if entry[0] == "failed"]
    assert isinstance(failure[1], ZeroDivisionError) and failure[2] is True
    assert len(seen) == 2
    assert not worked.thread.is_alive() and not failed.thread.is_alive(), "a worker thread outlived its job"
    assert not [t for t in threading.enumerate() if t.name.startswith("nalar-op")]


def test_a_coroutine_runs_on_its_loop_thread_and_reports_back_on_the_gui_thread(qtbot, loop_thread) -> None:
    """Bug caught: a coroutine run on the UI's loop instead of its own (a slow MCP or engine call stalls the
    window), or its result handed over on the loop thread."""
    ran_on: list[str] = []

    async def where() -> str:
        ran_on.append(threading.current_thread().name)
        await asyncio.sleep(0)
        return "done"

    results: list[tuple[str, bool]] = []
    op = run_on(loop_thread, "asking", where()).success(
        lambda value: results.append((value, threading.current_thread() is threading.main_thread())))
    qtbot.waitUntil(lambda: op.settled, timeout=5000)
    assert ran_on == ["test-ops"] and results == [("done", True)]


def test_a_closed_owner_drops_a_late_result_without_a_crash(qtbot) -> None:
    """Bug caught: a worker that emitted on a dialog deleted meanwhile ("Internal C++ object already deleted"),
    or a callback that ran on a closed window's widgets."""
    release = threading.Event()
    owner = QObject()
    called: list[object] = []
    op = run_blocking("a slow job", lambda: release.wait(5) and "late", parent=owner).success(called.append)
    shiboken6.delete(owner)  # the window closed while the job ran
    release.set()
    qtbot.waitUntil(lambda: op.settled, timeout=5000)
    assert called == [] and not op.running


def test_cancel_drops_the_result_and_cancels_the_coroutine_on_its_loop(qtbot, loop_thread) -> None:
    """Bug caught: a cancelled job's coroutine left running on the loop thread, or its result still delivered."""
    started, cancelled = threading.Event(), threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    called: list[object] = []
    op = run_on(loop_thread, "waiting", forever()).success(called.append).failure(called.append)
    assert started.wait(5)
    op.cancel()
    qtbot.waitUntil(lambda: op.settled and cancelled.is_set(), timeout=5000)
    assert called == []


def test_a_failure_nobody_handles_reaches_the_user_and_the_log(qtbot, caplog) -> None:
    """Bug caught: a background failure with no handler vanished (the user waited on nothing) or showed a raw
    traceback instead of a message with a fix."""
    def broken() -> None:
        raise OSError("disk full")

    with caplog.at_level(logging.WARNING, logger="app.ui.controllers.operations"), \
            qtbot.waitSignal(runner().unhandled, timeout=5000) as shown:
        run_blocking("Saving the report", broken)
    error = shown.args[0]
    assert isinstance(error, OperationError)
    assert error.message == "Saving the report failed: disk full" and "log folder" in error.fix
    assert any(r.exc_info and "disk full" in str(r.exc_info[1]) for r in caplog.records), "not logged"


def test_an_awaited_operation_gives_the_awaiting_code_its_result_or_its_error(qtbot, ui_loop) -> None:
    """Bug caught: a step of a multi-step slot (shut the old engine down, then close it) that didn't wait for
    the step before, or whose failure reached the user twice (once awaited, once as unhandled)."""
    outcomes: list[object] = []

    async def steps() -> None:
        outcomes.append(await run_blocking("one", lambda: 1))
        try:
            await run_blocking("two", lambda: 1 // 0)
        except ZeroDivisionError as exc:
            outcomes.append(type(exc))

    with qtbot.assertNotEmitted(runner().unhandled, wait=100):
        task = ui_loop.create_task(steps())
        qtbot.waitUntil(task.done, timeout=5000)
    assert outcomes == [1, ZeroDivisionError]


def test_an_unhandled_failure_shows_in_the_window_banner_as_plain_text(qtbot, make_window) -> None:
    """Bug caught: a failure with no handler that the window never showed, or whose exception text (from a
    server or a file) was rendered as markup in the banner."""
    from app.engine.scripted import ScriptedEngineDouble

    window = make_window(ScriptedEngineDouble(), start=False)

    def broken() -> None:
        raise OSError("<b>bold</b> reply from a server")

    run_blocking("Fetching the list", broken)
    qtbot.waitUntil(window.banner.isVisible, timeout=5000)
    assert "Fetching the list failed: &lt;b&gt;bold&lt;/b&gt; reply from a server" in window.banner.text()
    assert "log folder" in window.banner.text()
