"""Take the README's Compare screenshot: one question answered under three variants at once, side by side.

The engine is the scripted double (no model runs): it plays each variant's reply, at once, through the same
bridge and runner as the real engine. The shot is a widget render (grab()), so it works offscreen:
    XDG_CONFIG_HOME=$(mktemp -d) XDG_DATA_HOME=$(mktemp -d) QT_QPA_PLATFORM=offscreen \
        .venv/bin/python packaging/linux/screenshot_compare.py docs
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import QTimer
from shots import run_until_done  # beside this script (packaging/linux/shots.py)

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore
from app.core.settings.settings import EngineConfig, Settings
from app.engine.scripted import Script, ScriptedEngineDouble
from app.ui.app_main import open_window, start_qt

QUESTION = "A shirt costs $20 after a 20% discount. What was its price before the discount?"


def words(text: str) -> list[str]:
    return [word + " " for word in text.split(" ")]


SCRIPTS = [
    Script(words("The price before the discount was $25."), tokens_per_second=80),
    Script(["<think>", *words("Let p be the old price. A 20% discount leaves 80% of it, so 0.8 p = 20 and "
                              "p = 20 / 0.8 = 25."), "</think>",
            *words("p = 25.00 dollars: 80% of $25 is $20.")], tokens_per_second=80),
    Script(["<think>", *words("The sale price is what is left after taking 20% off. 20% off means paying 80%, "
                              "four fifths. If four fifths is $20, one fifth is $5 and five fifths is $25. "
                              "Check: 20% of 25 is 5, and 25 - 5 = 20. Right."), "</think>",
            *words("It cost **$25** before the discount.")], tokens_per_second=80),
]


def main(out: Path) -> int:
    chat = Conversation(title="A discounted shirt", turns=[Turn(user=QUESTION, thinking="0.8 p = 20.",
                                                                answer="$25.", finish_reason="stop")])
    store = HistoryStore()
    store.add_conversations([chat])
    store.close()
    app, loop = start_qt(sys.argv)
    window = open_window(ScriptedEngineDouble(SCRIPTS), Settings(engine=EngineConfig(max_model_len=2048)))
    window.controller.start_engine()
    done: list[int] = []
    state: dict[str, object] = {}

    def start() -> None:
        if not window.controls.send_button.isEnabled():
            QTimer.singleShot(100, start)
            return
        dialog = state["dialog"] = window.dialogs.open_compare()
        assert dialog is not None
        dialog.resize(1180, 560)
        dialog.run_button.click()
        QTimer.singleShot(100, shoot)

    def shoot() -> None:
        dialog = state["dialog"]
        comparison = dialog.runner.comparison  # type: ignore[attr-defined]
        if comparison is None or not comparison.done:
            QTimer.singleShot(100, shoot)
            return
        dialog.columns[1].fold.setChecked(True)  # type: ignore[attr-defined]
        app.processEvents()
        dialog.grab().save(str(out / "screenshot-compare.png"))  # type: ignore[attr-defined]
        print(f"screenshot: saved in {out}")
        dialog.reject()  # type: ignore[attr-defined]
        window.close()
        done.append(0)

    return run_until_done(loop, done, start)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs").resolve()))
