"""EngineController: the engine's life above the bridge, with no widgets.

Start, stop, switch backends, notice a death while idle, run the local API server, and pause for a
benchmark that needs the machine. The window shows what it reports; dialogs drive it through its
public methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Signal
from qasync import asyncSlot

from app.core.models.model_families import model_family, with_card_sampling
from app.core.settings.keystore import KeyStore
from app.core.settings.settings import EngineConfig, Settings, changed, save_settings
from app.engine.base import SHUTDOWN_GRACE_S, EngineBase
from app.engine.errors import NO_FIX, EngineFailure, EngineFix, FailureKind, engine_stopped
from app.engine.events import EngineErrorEvent
from app.ui.controllers.bridge import EngineBridge
from app.ui.controllers.operations import run_blocking, run_on

if TYPE_CHECKING:
    from app.server.api_server import LocalApiServer

log = logging.getLogger(__name__)
HEALTH_POLL_MS = 1000


class EngineController(QObject):
    """One engine at a time behind ``self.bridge``; ``busy()`` says whether a reply streams (no restarts then)."""

    starting = Signal()             # input waits: the engine is (re)loading
    state_changed = Signal()        # ready or not ready any more
    failure = Signal(object)        # EngineFailure for the user; ``retry()`` is its action
    engine_stopped = Signal()       # the engine died while nobody was asking it anything
    api_url_changed = Signal(str)   # the local API server's URL; "" when it is off
    settings_changed = Signal(object, object)  # (before, after): saved through apply_settings
    notice = Signal(str)

    def __init__(self, engine: EngineBase, settings: Settings, keys: KeyStore,
                 busy: Callable[[], bool] = lambda: False, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.settings = settings
        self.keys = keys
        self.bridge = EngineBridge(engine, self)
        self.api_server: LocalApiServer | None = None
        self.closing = False
        self._busy = busy
        self._engine_keys = keys.profile_changes  # a key changed since then: rebuild the engine
        self._death_reported = False
        self._pending_fallback: EngineFix = NO_FIX  # the settings change that retry() tries
        self._started_config: EngineConfig | None = None  # what the running engine was started with
        self._start_task: asyncio.Task[None] | None = None
        self._health_timer = QTimer(self)
        self._health_timer.setInterval(HEALTH_POLL_MS)
        self._health_timer.timeout.connect(self.check_engine_health)
        self._health_timer.start()
        self.bridge.error.connect(self._on_engine_error)
        self.bridge.engine_ready.connect(lambda _ready: self._on_ready())

    @property
    def engine_ready(self) -> bool:
        return self.bridge.ready is not None and not self.bridge.engine.engine_died()

    @property
    def running(self) -> bool:
        """An engine is loaded (ready, or serving a reply)."""
        return self.bridge.ready is not None

    def _on_ready(self) -> None:
        self.state_changed.emit()
        self.update_api_server()

    def _on_engine_error(self, event: EngineErrorEvent) -> None:
        self.report_failure(event.failure)

    def report_failure(self, failure: EngineFailure) -> None:
        self._pending_fallback = failure.fallback
        self.failure.emit(failure)

    def check_engine_health(self) -> None:
        """An engine process that dies while idle is noticed here, not at the next Send."""
        if self._death_reported or not self.bridge.engine.engine_died():
            return
        self._death_reported = True
        self.engine_stopped.emit()
        if not self._busy():  # a streaming reply reports the death itself, with its partial text
            self.report_failure(engine_stopped(mid_reply=False))
        self.state_changed.emit()

    # ---- engine lifecycle -------------------------------------------------------------------

    @asyncSlot()
    async def start_engine(self, config: EngineConfig | None = None) -> None:
        """Load (or reload) the engine with the current settings; input waits until it is ready."""
        await self._start(config or self.settings.engine)

    async def _start(self, config: EngineConfig) -> bool:
        """Start with ``config``; True once the engine is ready. A failure is reported, not raised. Once the
        window is closing (a quit, a lost X server) nothing starts: no window would end that engine."""
        if self.closing:
            return False
        self._death_reported = False
        self._start_task = asyncio.current_task()
        self.starting.emit()
        started = False
        try:
            await self.bridge.start(config)
            self._started_config, started = config, True
        except EngineFailure as failure:
            self.report_failure(failure)
        except Exception as exc:  # a bug, not a user problem: log it, still say something useful
            log.exception("engine start crashed")
            self.report_failure(EngineFailure(FailureKind.ENGINE_START_FAILED, f"The engine crashed: {exc}",
                                              "See the log folder (Help → Open log folder)."))
        self.state_changed.emit()
        return started

    @asyncSlot()
    async def retry(self) -> None:
        """The failure's action: start again with its suggested setting, for this start only.

        The setting is kept (through ``apply_settings``, as if chosen in Settings) only once the start
        works: a suggestion that fails too must not replace the user's choice for good.
        """
        fallback, self._pending_fallback = self._pending_fallback, NO_FIX
        if not fallback:
            await self._start(self.settings.engine)
            return
        trial = self.settings.with_engine(**fallback.changes())
        if await self._start(trial.engine):
            self.apply_settings(trial)  # the engine already runs with it: saved, no restart

    def set_reasoning_effort(self, effort: str) -> None:
        """The window's effort control (gpt-oss): a sampling setting, saved; no engine restart."""
        self.apply_settings(changed(self.settings, sampling=changed(self.settings.sampling, reasoning_effort=effort)))

    def apply_settings(self, settings: Settings) -> None:
        """The one way settings change: save, tell ``settings_changed`` (the tool servers follow it), and
        restart the engine only if an engine or backend setting changed (never under a reply)."""
        if settings.engine.model != self.settings.engine.model:  # a model was chosen: its card's sampling
            settings = changed(settings, sampling=with_card_sampling(settings.sampling,
                                                                     model_family(settings.engine.model)))
        switch = settings.backends != self.settings.backends or self.keys.profile_changes != self._engine_keys
        running = self._started_config if self.bridge.ready is not None else None
        restart = switch or settings.engine != running
        before, self.settings = self.settings, settings
        save_settings(settings)
        self.settings_changed.emit(before, settings)
        if switch and not self._busy():
            from app.engine.backends import build_engine

            self._engine_keys = self.keys.profile_changes
            self.switch_engine(build_engine(settings.backends, self.keys))
        elif restart and not self._busy():
            self.start_engine(settings.engine)
        else:
            self.update_api_server()

    @asyncSlot()
    async def switch_engine(self, engine: EngineBase) -> None:
        """Shut the old backend down (its processes too), then start the new one."""
        old = self.bridge.engine
        self.starting.emit()
        await self.stop_api_server()
        await run_on(old.loop_thread, "Shutting the previous backend down", old.shutdown(), parent=self)
        await run_blocking("Ending the previous backend's processes", old.close, parent=self)
        self.bridge.set_engine(engine)
        await self.start_engine(self.settings.engine)

    async def pause(self) -> bool:
        """Free the machine for a benchmark: the API server and the engine stop. True if one was running."""
        was_running = self.running
        if was_running:
            await self.stop_api_server()  # it serves the chat engine; it comes back when the engine is ready
            await self.bridge.shutdown()
        self.bridge.drain()
        self.state_changed.emit()
        return was_running

    def resume(self) -> None:
        """Start the engine again after ``pause()``, unless the app is closing."""
        if not self.closing:
            self.start_engine()

    # ---- local API server ----------------------------------------------------------------------

    @asyncSlot()
    async def update_api_server(self) -> None:
        """Run the local API server when it is on and an engine is ready; restart it on a new port."""
        wanted = self.settings.api_server
        server = self.api_server
        if server is not None and (not wanted.enabled or server.port != wanted.port
                                   or server.engine is not self.bridge.engine):
            await self.stop_api_server()
        if not wanted.enabled or self.api_server is not None or self.bridge.ready is None:
            return
        from app.server.api_server import LocalApiServer  # aiohttp: only when the user turns the server on

        engine = self.bridge.engine
        server = LocalApiServer(engine, self.keys.api_server_token(), wanted.port, self.settings.sampling)
        try:
            await run_on(engine.loop_thread, "Starting the local API server", server.start(), parent=self)
        except OSError as exc:
            self.notice.emit(f"The local API server could not listen on 127.0.0.1:{wanted.port} ({exc.strerror}). "
                             "Choose another port in Settings.")
            return
        self.api_server = server
        self.api_url_changed.emit(server.url)

    async def stop_api_server(self) -> None:
        server, self.api_server = self.api_server, None
        self.api_url_changed.emit("")
        if server is not None and server.engine.loop_thread.alive:
            await run_on(server.engine.loop_thread, "Stopping the local API server", server.stop(), parent=self)

    def close(self) -> None:
        """Stop the API server and shut the engine down (its processes too); blocks a few seconds at most."""
        self.closing = True
        self._health_timer.stop()
        loop_thread = self.bridge.engine.loop_thread
        if self.api_server is not None and loop_thread.alive:
            with contextlib.suppress(Exception):
                loop_thread.submit(self.api_server.stop()).result(5)
            self.api_server = None
        if self._start_task is not None:
            self._start_task.cancel()  # an abandoned start is not awaited: engine.close() ends what it spawned
        self.bridge.close(timeout=SHUTDOWN_GRACE_S)
