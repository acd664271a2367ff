"""Take the README's conversation screenshots: the branch navigator in the thread, and the search dialog.

The history is a stored one (a chat whose reply was regenerated and whose question was edited), so no model
runs; the scripted engine only makes the window's controls live. Both shots are widget renders (grab()), so
they work offscreen:
    XDG_CONFIG_HOME=$(mktemp -d) XDG_DATA_HOME=$(mktemp -d) QT_QPA_PLATFORM=offscreen \
        .venv/bin/python packaging/linux/screenshot_branches.py docs
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtTest import QTest
from shots import run_until_done  # beside this script (packaging/linux/shots.py)

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore
from app.core.settings.settings import EngineConfig, Settings
from app.engine.scripted import ScriptedEngineDouble
from app.ui.app_main import open_window, start_qt

WHY_BLUE = ("Sunlight scatters off the air's molecules, and short wavelengths scatter most (Rayleigh "
            "scattering, about 1/λ⁴). Blue light reaches your eye from every direction of the sky.")


def seed_history() -> None:
    """One chat with three tries of its answer and an edited question (the second try shown), and two others."""
    chat = Conversation(title="Why is the sky blue?", turns=[
        Turn(user="Why is the sky blue?", thinking="Rayleigh scattering; keep it short.", answer=WHY_BLUE,
             finish_reason="stop", backend="local")])
    second = chat.branch_at(0)
    second.thinking, second.answer, second.finish_reason = "Explain with wavelengths.", (
        "Air scatters blue light (short wavelength) far more than red: that scattered blue is the sky you "
        "see. At sunset the light crosses more air, the blue is scattered away, and red is left."), "stop"
    chat.branch_at(0).answer = "Because of Rayleigh scattering."
    chat.turns[-1].finish_reason = "stop"
    chat.show(second)
    follow = chat.add_turn(Turn(user="And why are sunsets red, then?", thinking="Longer path through air.",
                                answer="The low sun's light crosses far more air, so the blue is scattered out "
                                       "on the way; the red and orange that remain reach you.", finish_reason="stop"))
    chat.branch_at(1, "And why are sunsets orange on some days?").answer = (
        "Dust and smoke scatter longer wavelengths too, adding orange.")
    chat.turns[-1].finish_reason = "stop"
    chat.show(follow)
    others = [Conversation(title=title, turns=[Turn(user=user, answer=answer, finish_reason="stop")])
              for title, user, answer in (
                  ("Boiling a kettle", "How long does a kettle take to boil?", "About three minutes for a litre."),
                  ("Blue cheese", "Is blue cheese mould safe?", "Yes: Penicillium roqueforti is safe to eat."))]
    store = HistoryStore()
    store.add_conversations([*others, chat])
    store.close()


def main(out: Path) -> int:
    seed_history()
    app, loop = start_qt(sys.argv)
    window = open_window(ScriptedEngineDouble(), Settings(engine=EngineConfig(max_model_len=2048)))
    window.resize(1180, 760)
    window.controller.start_engine()
    done: list[int] = []

    def shoot() -> None:
        if not window.controls.send_button.isEnabled():
            QTimer.singleShot(100, shoot)
            return
        window.chat_view.thread_split.setSizes([300, 400])
        app.processEvents()
        centre = window.chat_view.parentWidget()
        centre.grab().save(str(out / "screenshot-branches.png"))
        dialog = window.dialogs.open_search()
        dialog.resize(620, 300)
        QTest.keyClicks(dialog.query, "blue")
        dialog.run_search()
        app.processEvents()
        dialog.grab().save(str(out / "screenshot-search.png"))
        dialog.close()
        print(f"screenshots: saved in {out}")
        window.close()
        done.append(0)

    return run_until_done(loop, done, shoot)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs").resolve()))
