"""The window quits before its first frame (issue 39, item 11: the X server went away during start-up)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_quit_before_the_first_frame_starts_no_engine_and_prints_no_traceback() -> None:
    """Bug caught: the first-frame callback started the engine after the window had closed, so the start ran on
    the engine's closed loop thread and printed "engine start crashed … Event loop is closed" (with a real engine,
    it would start an engine process that no window ends). A real child process runs ``run_app`` itself."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    done = subprocess.run([sys.executable, "-m", "tests.support.quit_before_first_frame"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "engine starts: 0" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "never awaited" not in done.stderr, done.stderr[-3000:]


def test_a_closed_controller_starts_no_engine(qtbot, ui_loop) -> None:
    """Bug caught: a start slot that runs after ``close()`` (any late signal: a retry, a settings change, the
    first frame) submits to the engine's ended loop thread; it must return without a start or a failure."""
    from app.core.settings.keystore import KeyStore
    from app.core.settings.settings import Settings
    from app.engine.scripted import ScriptedEngineDouble
    from app.ui.controllers.engine_controller import EngineController

    engine = ScriptedEngineDouble()
    controller = EngineController(engine, Settings(), KeyStore())
    failures: list[object] = []
    controller.failure.connect(failures.append)
    controller.close()
    task = controller.start_engine()
    qtbot.waitUntil(task.done, timeout=5_000)
    assert engine.starts == [] and failures == [] and task.exception() is None
