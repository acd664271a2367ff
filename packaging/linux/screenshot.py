"""Take docs/screenshot.png: the real app on the real engine, mid-answer, captured from the X screen.

Run under Xvfb (packaging/linux/screenshot.sh does that). The thinking pane folds when the
answer starts; the script re-opens it so both panes show.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.core.embedded_model import ensure_embedded_model
from app.core.settings import EngineConfig, SamplingConfig, Settings, save_settings

PROMPT = "A farmer has 17 sheep. All but 9 run away. How many are left? Explain."


def main(out: Path) -> int:
    # The user's own settings stay untouched: screenshot.sh points XDG_CONFIG_HOME at a temp dir.
    save_settings(Settings(engine=EngineConfig(model=str(ensure_embedded_model()), max_model_len=2048),
                           sampling=SamplingConfig(think_budget=80, max_tokens=160)))
    app = QApplication(sys.argv)
    started = time.monotonic()

    def window():
        return next(w for w in app.topLevelWidgets() if w.windowTitle() == "Nalar" and w.isVisible())

    def poll() -> None:
        if time.monotonic() - started > 600:
            print("screenshot: timed out", file=sys.stderr)
            app.exit(1)
            return
        try:
            win = window()
        except StopIteration:
            QTimer.singleShot(200, poll)
            return
        if win.send_button.isEnabled() and not win.conversation.turns:
            win.prompt.setPlainText(PROMPT)
            win.send()
        elif win.send_button.isEnabled():
            win.regenerate()  # the reply ended before the answer got long enough: try again
        elif win.streaming and len(win.answer_pane.text()) > 80:
            win.thinking_pane.set_folded(False)
            win.answer_pane.render_markdown()
            app.processEvents()
            screen = app.primaryScreen().grabWindow(0)  # the X server's pixels, not a widget render
            screen.copy(win.frameGeometry()).save(str(out))
            print(f"screenshot: saved {out}")
            win.close()
            app.quit()
            return
        QTimer.singleShot(100, poll)

    QTimer.singleShot(200, poll)
    from app.ui.app_main import run_app

    return run_app(sys.argv, process_started=time.perf_counter())


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshot.png").resolve()))
