"""Take the README's pause-and-edit screenshots: the thinking paused and edited (a hint added), and the reply
gone on from the edit with the user's text highlighted.

The scripted engine plays the model (a thought that slips on the units, then the rest after the hint), so no
model runs; the window is the real one, driven as the user drives it. Widget renders (grab()), so offscreen:
    XDG_CONFIG_HOME=$(mktemp -d) XDG_DATA_HOME=$(mktemp -d) QT_QPA_PLATFORM=offscreen \
        .venv/bin/python packaging/linux/screenshot_pause.py docs
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from PySide6.QtCore import QTimer

from app.core.settings.settings import EngineConfig, SamplingConfig, Settings
from app.engine.scripted import Script, ScriptedEngineDouble
from app.ui.app_main import cancel_pending_tasks, open_window, start_qt

QUESTION = "Item 3 of the list is 300 cm long. How long is it in metres?"
SLIP = ("The item is 300 cm long and I need metres. A metre is 10 cm, so I divide by 10: 300 / 10 = 30. "
        "So the item is 30 m long.")
FILLER = " Let me double-check the arithmetic once more before I answer." * 20
HINT = "\nHint: check the units."
AFTER_HINT = [" Right: a metre is 100 cm, not 10.", " So 300 cm / 100 = 3 m.", " That fits an item on a list.",
              "</think>", "Item 3 is **3 m** long: 300 cm ÷ 100 cm per metre."]


def main(out: Path) -> int:
    app, loop = start_qt(sys.argv)
    engine = ScriptedEngineDouble([Script(["<think>", *(w + " " for w in (SLIP + FILLER).split())],
                                          tokens_per_second=40), Script(AFTER_HINT, tokens_per_second=40)])
    settings = Settings(engine=EngineConfig(max_model_len=2048),
                        sampling=SamplingConfig(think_budget=1000, max_tokens=200))
    window = open_window(engine, settings)
    window.resize(1180, 760)
    window.controller.start_engine()
    session, pane = window.session, window.chat_view.thinking_pane
    centre = window.chat_view.parentWidget()
    done: list[int] = []

    async def shoot() -> None:
        await until(window.controls.send_button.isEnabled)
        window.prompt.setPlainText(QUESTION)
        window.controls.send_button.click()
        await until(lambda: "30 m long." in session.reply.thinking)
        window.menus.trigger("pause_thinking")
        await until(lambda: session.pause.paused)
        kept = session.reply.thinking
        pane.view.setPlainText(kept[:kept.index("30 m long.") + len("30 m long.")] + HINT)
        window.chat_view.thread_split.setSizes([90, 610])
        app.processEvents()
        centre.grab().save(str(out / "screenshot-pause-edit.png"))
        window.menus.trigger("resume_thinking")
        await until(lambda: session.reply.state == "finished" and "3 m" in session.reply.answer)
        window.chat_view.thinking_pane.set_folded(False)
        app.processEvents()
        centre.grab().save(str(out / "screenshot-pause-resumed.png"))
        print(f"screenshots: saved in {out}")
        window.close()
        done.append(0)

    with loop:
        loop.run_until_complete(shoot())
        loop.run_until_complete(cancel_pending_tasks())
    return 0 if done else 1


async def until(condition: object) -> None:
    while not condition():  # type: ignore[operator]
        await asyncio.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs").resolve()))
