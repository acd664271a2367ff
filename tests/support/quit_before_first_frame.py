"""A child process for tests/ui/test_quit_before_first_frame.py: Nalar's own ``run_app`` on the scripted engine
double, with a quit queued before the window's first frame (what Qt does when the X server goes away).
Prints the number of engine starts; the XDG folders come from the parent's environment."""
from __future__ import annotations

import sys
import time

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.core.settings.settings import load_settings, save_settings
from app.engine.scripted import ScriptedEngineDouble
from app.ui.app_main import run_app


def main() -> int:
    settings, _ = load_settings()
    save_settings(settings)  # not a first run: no welcome dialog, the first frame starts the engine
    app = QApplication(sys.argv)
    QTimer.singleShot(0, app.quit)  # queued before run_app's own first-frame timer, so it runs first
    engine = ScriptedEngineDouble()
    rc = run_app(sys.argv, process_started=time.perf_counter(), engine=engine)
    print(f"engine starts: {len(engine.starts)}", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
