"""Start the Qt application under qasync, show the window at once, then load the engine.

``start_qt`` and ``open_window`` are the one start-up, shared by the app and ``nalar bench ui`` (which also
closes with ``close_qt``): this module is the only way into ``ui/`` from ``commands/``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, cast

import qasync
from PySide6.QtCore import QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication, QWidget

from app.core.settings.instance_lock import InstanceLock
from app.core.settings.paths import DataUnavailable, resources_dir
from app.core.settings.settings import Settings, load_settings, save_settings, settings_path
from app.engine.base import EngineBase
from app.engine.machine.capability import HardwareProbe

if TYPE_CHECKING:
    from app.core.chat.history import HistoryStore
    from app.core.settings.keystore import KeyStore
    from app.ui.main_window import MainWindow

log = logging.getLogger(__name__)
ICON = resources_dir() / "nalar.svg"


def run_app(argv: list[str], *, process_started: float, engine: EngineBase | None = None,
            report_startup: bool = False) -> int:
    """Run the window until it closes. vllm and torch are imported only after it is shown."""
    app, loop = start_qt(argv)
    lock = InstanceLock()  # held until this process ends
    if not lock.acquire():
        return refuse_start(lock.already_running())
    first_run = not settings_path().exists()
    try:
        settings, notice = load_settings()
        from app.core.chat.history import HistoryStore

        history = HistoryStore()
    except DataUnavailable as refused:  # in use, or from a newer Nalar: left untouched
        return refuse_start(f"{refused.problem}\n\n{refused.fix}")
    welcome = False
    if first_run:
        # The KV dtype defaults to fp8 where this machine supports it; saved so Settings shows it.
        from app.engine.machine.capability import first_run_settings, probe_hardware

        probe = probe_hardware()
        settings = first_run_settings(settings, probe)
        welcome = offer_welcome(settings, probe)
        if not welcome:
            save_settings(settings)  # with a welcome dialog, the user's choice is saved instead
    from app.core.settings.keystore import KeyStore

    keys = KeyStore()
    if engine is None:
        from app.engine.backends import build_engine

        engine = build_engine(settings.backends, keys)

    window = open_window(engine, settings, notice, keys, history)
    if keys.notice:  # a profile needed a key and there is no keyring to read it from
        window.show_notice(keys.notice)

    closed = asyncio.Event()
    app.aboutToQuit.connect(closed.set)

    def on_first_frame() -> None:
        if closed.is_set():  # quit before the first frame (the X server went away): start nothing
            return
        shown = time.perf_counter() - process_started
        log.info("window shown %.3f s after process start", shown)
        if report_startup:
            print(f"nalar: window shown {shown:.3f} s after process start", flush=True)
        if os.environ.get("NALAR_QUIT_AFTER_SHOWN"):  # `nalar bench startup` measures and leaves
            window.close()
            app.quit()
            return
        if welcome:  # the engine starts once a model is chosen (or the dialog is closed: embedded)
            window.dialogs.open_model_chooser(first_run=True)
        else:
            window.controller.start_engine()

    # After the first paint: the window is on screen before the engine (and torch) load.
    QTimer.singleShot(0, on_first_frame)
    _close_on_signals(window)
    with loop:
        loop.run_until_complete(closed.wait())
        loop.run_until_complete(cancel_pending_tasks())  # an abandoned engine start, a slot mid-await
    window.controller.bridge.close()  # idempotent: the window's closeEvent usually did it already
    return 0


def start_qt(argv: list[str]) -> tuple[QApplication, qasync.QEventLoop]:
    """The QApplication (made once) with Nalar's name and icon, and a qasync loop over it as asyncio's loop."""
    app = cast(QApplication, QApplication.instance() or QApplication(argv))
    QApplication.setApplicationName("Nalar")
    QApplication.setDesktopFileName("nalar")
    QApplication.setWindowIcon(QIcon(str(ICON)))
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    return app, loop


def open_window(engine: EngineBase, settings: Settings, notice: str | None = None,
                keys: KeyStore | None = None, history: HistoryStore | None = None) -> MainWindow:
    """The main window on ``engine``, shown; the engine starts when its "restart_engine" action runs."""
    from app.ui.main_window import MainWindow

    window = MainWindow(engine, settings, notice, history=history, keys=keys)
    window.show()
    return window


def end_window(window: MainWindow) -> None:
    """``window`` closed as the user closes it, then what the app's exit ends with it: the formula drawer's child,
    which the process's windows share and which otherwise ends at exit. For a bench that opens many windows in one
    process and checks after each that nothing is left running; a later formula starts a new child."""
    from app.ui.chat.answer.formulas import close_formula_drawer

    window.close()
    close_formula_drawer()


def close_qt(app: QApplication, loop: qasync.QEventLoop) -> None:
    """End a loop that ``start_qt`` made and that is not running: its tasks first, then the loop, before Qt's
    objects go (closed after them, qasync raised "Signal source has been deleted" at exit)."""
    loop.run_until_complete(cancel_pending_tasks())
    loop.close()
    asyncio.set_event_loop(None)
    app.processEvents()


def refuse_start(message: str) -> int:
    """Nalar can't start without harming the user's data: say why (log, console, a dialog), exit 1."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QMessageBox

    log.error("not starting: %s", message)
    print(f"nalar: {message}", file=sys.stderr, flush=True)
    box = QMessageBox(QMessageBox.Icon.Critical, "Nalar can't start", message)
    box.setTextFormat(Qt.TextFormat.PlainText)  # paths and SQLite's words, never markup
    box.exec()
    return 1


async def cancel_pending_tasks(timeout: float = 2.0) -> None:
    """Cancel every other task on the running loop and let them end, before the loop closes: closed with
    tasks pending, asyncio reports each destroyed task and qasync disconnects signals of deleted objects."""
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=timeout)


def offer_welcome(settings: Settings, probe: HardwareProbe) -> bool:
    """First run only, on every machine: with an NVIDIA GPU it offers models sized by VRAM, without one
    small reasoning models sized by RAM (the embedded model stays one click away). NALAR_NO_WELCOME=1
    skips it, for scripted starts; so does `nalar bench startup` (NALAR_QUIT_AFTER_SHOWN)."""
    if settings.engine.model or os.environ.get("NALAR_NO_WELCOME") or os.environ.get("NALAR_QUIT_AFTER_SHOWN"):
        return False
    if not probe.gpus:
        log.info("first run without an NVIDIA GPU: offering models for the CPU engine")
    return True


def _close_on_signals(window: QWidget) -> None:
    """SIGTERM/SIGINT close the window like the user would, so the engine's processes end too.

    Python runs signal handlers only between bytecodes; a slow no-op timer gives it the chance
    while Qt's C++ loop waits.
    """
    def request_close(signum: int, frame: object) -> None:
        log.info("signal %d: closing", signum)
        QTimer.singleShot(0, window.close)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, request_close)
    heartbeat = QTimer(window)
    heartbeat.timeout.connect(lambda: None)
    heartbeat.start(250)


if __name__ == "__main__":
    sys.exit(run_app(sys.argv, process_started=time.perf_counter()))
