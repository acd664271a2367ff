"""Take the README's knowledge screenshot: a chat asking over a collection of notes, the answer citing [1] and [2],
the sources listed under it, and citation [1]'s viewer open on the file, the passage highlighted.

The notes are written to a temporary folder and indexed for real (Knowledge…, the one runner, SQLite FTS5); the
passages the model reads are the real look-up's. The model is played by the scripted engine double (the embedded
135M model doesn't cite reliably), so the answer's words are scripted. Run under Xvfb with a window manager, with
throwaway config and data dirs:
    XDG_CONFIG_HOME=$(mktemp -d) XDG_DATA_HOME=$(mktemp -d) QT_QPA_PLATFORM=xcb xvfb-run -a \\
        -s "-screen 0 1400x860x24" sh -c 'openbox & .venv/bin/python packaging/linux/screenshot_knowledge.py'
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QApplication

from app.core.chat.answer_markup import CITE_SCHEME, LINK_SCHEME
from app.core.settings.settings import EngineConfig, SamplingConfig, Settings
from app.engine.scripted import Script, ScriptedEngineDouble
from app.ui.app_main import cancel_pending_tasks, open_window, start_qt

NOTES = {
    "kettle.md": "# Kitchen\n\nDescale the kettle monthly: fill it half with water and half with white vinegar, boil, "
                 "leave it for an hour, then rinse twice.\n\nCitric acid works too: two spoons in a full kettle.\n",
    "appliances/manual-notes.txt": "Kettle model K-200.\nThe element is under the base plate, so limescale shows as a "
                                   "white crust on the plate.\nNever use abrasive pads on the plate.\n",
    "garden.md": "# Garden\n\nTomatoes need six hours of sun. Water at the root, in the morning.\n",
}
QUESTION = "How do I descale my kettle, and what should I avoid?"
ANSWER = ("<think>The notes give a method [1] and a warning from the manual notes [2].</think>",
          "Fill the kettle **half with water and half with white vinegar**, boil it, leave it for an hour, then rinse "
          "it twice [1]. Two spoons of citric acid in a full kettle work as well [1].\n\n",
          "Avoid abrasive pads on the base plate: the limescale there is a white crust over the element [2].")


def main(out: Path) -> int:
    folder = Path(tempfile.mkdtemp(prefix="nalar-notes-")) / "notes"
    for name, text in NOTES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    app, loop = start_qt(sys.argv)
    engine = ScriptedEngineDouble([Script(list(ANSWER), tokens_per_second=60)])
    settings = Settings(engine=EngineConfig(max_model_len=4096), sampling=SamplingConfig(think_budget=256,
                                                                                         max_tokens=256))
    window = open_window(engine, settings)
    window.resize(1340, 780)
    window.controller.start_engine()
    done: list[int] = []

    async def shoot() -> None:
        await until(window.controls.send_button.isEnabled)
        window.menus.trigger("knowledge")
        dialog = window.knowledge.dialog
        dialog.new_collection("notes", folder)
        await until(lambda: dialog.sync_operation is None)
        dialog.close()
        window.knowledge.choose("notes", True)
        window.prompt.setPlainText(QUESTION)
        window.menus.trigger("send")
        await until(lambda: window.session.reply.state == "finished")
        await asyncio.sleep(0.3)
        links = window.chat_view.answer_pane.document.collected.links
        first = next(i for i, link in enumerate(links) if link.href == f"{CITE_SCHEME}:1")
        window.chat_view.answer_pane.document.on_anchor(QUrl(f"{LINK_SCHEME}:{first}"))
        viewer = window.knowledge.sources.viewer
        await until(lambda: viewer.settled)  # the file read (off the GUI thread) and scrolled to the passage
        viewer.resize(600, 330)
        viewer.move(window.geometry().right() - 640, window.geometry().top() + 300)
        await asyncio.sleep(0.5)
        app.processEvents()
        screen = QApplication.primaryScreen().grabWindow(0)  # the X server's pixels: the window and the viewer
        screen.copy(window.frameGeometry()).save(str(out))
        print(f"screenshot: saved {out}")
        viewer.close()
        window.close()
        done.append(0)

    with loop:
        loop.run_until_complete(shoot())
        loop.run_until_complete(cancel_pending_tasks())
    return 0 if done else 1


async def until(condition: object) -> None:
    for _ in range(1200):
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise TimeoutError("screenshot: a step did not happen within a minute")


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshot-knowledge.png").resolve()))
