"""Take the README screenshots: the real app on the real engine, captured from the X screen.

docs/screenshot.png is mid-answer with the thinking trace re-opened, -folded.png the same moment
with the trace folded into its header, -second-turn.png a follow-up question answered under the
first turn. Run under Xvfb (packaging/linux/screenshot.sh does that).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.core.models.embedded_model import ensure_embedded_model
from app.core.settings.settings import EngineConfig, SamplingConfig, Settings, save_settings

PROMPT = "A farmer has 17 sheep. All but 9 run away. How many are left? Explain."
FOLLOW_UP = "And if 4 of those wander back, how many are there then?"


def main(out: Path) -> int:
    # The user's own settings stay untouched: screenshot.sh points XDG_CONFIG_HOME at a temp dir.
    save_settings(Settings(engine=EngineConfig(model=str(ensure_embedded_model()), max_model_len=2048),
                           sampling=SamplingConfig(think_budget=80, max_tokens=160)))
    app = QApplication(sys.argv)
    started = time.monotonic()

    def window():
        return next(w for w in app.topLevelWidgets() if w.windowTitle() == "Nalar" and w.isVisible())

    shots = [out, out.with_name(f"{out.stem}-folded.png"), out.with_name(f"{out.stem}-second-turn.png")]
    for shot in shots:
        shot.unlink(missing_ok=True)  # each is taken once, when its moment comes

    def grab(win, path: Path) -> None:
        win.chat_view.answer_pane.render_markdown()
        app.processEvents()
        screen = app.primaryScreen().grabWindow(0)  # the X server's pixels, not a widget render
        screen.copy(win.frameGeometry()).save(str(path))
        print(f"screenshot: saved {path}")

    def poll() -> None:
        if time.monotonic() - started > 900:
            print("screenshot: timed out", file=sys.stderr)
            app.exit(1)
            return
        try:
            win = window()
        except StopIteration:
            QTimer.singleShot(200, poll)
            return
        turns = len(win.session.conversation.turns)
        if win.controls.send_button.isEnabled() and turns == 0:
            win.prompt.setPlainText(PROMPT)
            win.send()
        elif win.controls.send_button.isEnabled() and turns == 1 and not shots[0].exists():
            win.session.regenerate()  # the reply ended before the answer got long enough: try again
        elif win.controls.send_button.isEnabled() and turns == 1:
            win.prompt.setPlainText(FOLLOW_UP)
            win.send()
        elif win.controls.send_button.isEnabled():
            win.session.regenerate()
        elif (win.session.streaming and len(win.chat_view.answer_pane.text()) > 80 and turns == 1
              and not shots[0].exists()):
            win.chat_view.thinking_pane.set_folded(False)
            grab(win, shots[0])
            win.chat_view.thinking_pane.set_folded(True)
            grab(win, shots[1])
        elif win.session.streaming and len(win.chat_view.answer_pane.text()) > 60 and turns == 2:
            grab(win, shots[2])
            win.close()
            app.quit()
            return
        QTimer.singleShot(100, poll)

    QTimer.singleShot(200, poll)
    from app.ui.app_main import run_app

    return run_app(sys.argv, process_started=time.perf_counter())


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshot.png").resolve()))
