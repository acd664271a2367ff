"""Take the README's tool-call screenshot: the real app, engine and an MCP server (tests/support/mcp_demo_server.py).

A forced call to ``add`` is approved with Run; the shot is taken when the answer is in, showing the
thinking, the call's card with its result folded, and the answer. Run under Xvfb with a window manager:
    xvfb-run -s "-screen 0 1280x800x24" sh -c 'openbox & .venv/bin/python packaging/linux/screenshot_tools.py'
with XDG_CONFIG_HOME and XDG_DATA_HOME pointed at a temp dir (the user's settings stay untouched).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.core.models.embedded_model import ensure_embedded_model
from app.core.settings.settings import EngineConfig, SamplingConfig, Settings, ToolsConfig, ToolServer, save_settings

ROOT = Path(__file__).resolve().parents[2]
SERVER = ToolServer(name="demo", command=sys.executable, args=(str(ROOT / "tests" / "mcp_demo_server.py"),))
PROMPT = "What is 17 + 25? Use the add tool."


def main(out: Path) -> int:
    save_settings(Settings(engine=EngineConfig(model=str(ensure_embedded_model()), max_model_len=2048),
                           sampling=SamplingConfig(think_budget=48, max_tokens=60, temperature=0.0),
                           tools=ToolsConfig(servers=(SERVER,), enabled=True)))
    app = QApplication(sys.argv)
    started = time.monotonic()
    out.unlink(missing_ok=True)

    def poll() -> None:
        if time.monotonic() - started > 900:
            print("screenshot: timed out", file=sys.stderr)
            app.exit(1)
            return
        win = next((w for w in app.topLevelWidgets() if w.windowTitle() == "Nalar" and w.isVisible()), None)
        if win is None:
            QTimer.singleShot(200, poll)
            return
        session = win.session
        turns = session.conversation.turns
        if win.controls.send_button.isEnabled() and not turns and "demo" in win.tools.states:
            win.controls.tools_switch.setChecked(True)
            session.tool_choice = {"type": "function", "function": {"name": "add"}}
            win.prompt.setPlainText(PROMPT)
            win.send()
        elif session.awaiting_tools:
            for card in win.chat_view.tool_panel.cards.values():
                if card.run_button.isVisible():
                    card.run_button.click()
        elif turns and turns[-1].finish_reason and turns[-1].tool_rounds:
            win.chat_view.thinking_pane.set_folded(False)
            win.chat_view.answer_pane.render_markdown()
            app.processEvents()
            screen = app.primaryScreen().grabWindow(0)  # the X server's pixels, not a widget render
            screen.copy(win.frameGeometry()).save(str(out))
            print(f"screenshot: saved {out}")
            win.close()
            app.quit()
            return
        QTimer.singleShot(150, poll)

    QTimer.singleShot(200, poll)
    from app.ui.app_main import run_app

    return run_app(sys.argv, process_started=time.perf_counter())


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshot-tools.png").resolve()))
