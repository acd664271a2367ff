"""Take the README's model browser screenshot: Engine → Choose model…, "qwen3" typed, every result's verdict in.

The hub is the tests' fake hub on 127.0.0.1 (tests/support/hub_server.py) with Qwen3-shaped repos whose listing
claims real sizes; the verdicts are the planner's for this machine. Run it under Xvfb, as screenshot.sh does:
    XDG_CONFIG_HOME=$(mktemp -d) XDG_DATA_HOME=$(mktemp -d) QT_QPA_PLATFORM=xcb xvfb-run -a -s "-screen 0 1280x800x24" \
        bash -c 'openbox & .venv/bin/python packaging/linux/screenshot_models.py docs/screenshot-models.png'
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's app/, and tests/support's fake hub

from PySide6.QtCore import QTimer  # noqa: E402
from shots import run_until_done  # noqa: E402  (beside this script: packaging/linux/shots.py)

from app.core.settings.settings import EngineConfig, Settings  # noqa: E402
from app.engine.scripted import ScriptedEngineDouble  # noqa: E402
from app.ui.app_main import open_window, start_qt  # noqa: E402
from tests.support.bench_hub import SHAPES, planned_repo  # noqa: E402
from tests.support.hub_server import LocalHub  # noqa: E402

# (repo id, shape index in SHAPES, downloads, an FP8 copy)
REPOS = (("Qwen/Qwen3-0.6B", 0, 4_210_000, False), ("Qwen/Qwen3-1.7B", 1, 2_930_000, False),
         ("Qwen/Qwen3-8B", 2, 2_450_000, True), ("Qwen/Qwen3-14B", 3, 1_120_000, False),
         ("Qwen/Qwen3-32B", 4, 980_000, False), ("unsloth/Qwen3-8B-unsloth", 2, 310_000, False),
         ("deepseek-ai/DeepSeek-R1-0528-Qwen3-8B", 2, 290_000, False), ("Qwen/Qwen3-1.7B-Base", 1, 120_000, False))


def main(out: Path) -> int:
    folder = Path(tempfile.mkdtemp(prefix="nalar-shot-hub-"))
    repos = [planned_repo(repo_id, folder / str(i), SHAPES[shape], downloads, fp8)
             for i, (repo_id, shape, downloads, fp8) in enumerate(REPOS)]
    with LocalHub(repos) as hub:
        os.environ["HF_ENDPOINT"] = hub.endpoint
        app, loop = start_qt(sys.argv)
        window = open_window(ScriptedEngineDouble(), Settings(engine=EngineConfig(max_model_len=2048)))
        browser = window.dialogs.open_model_browser()
        browser.resize(1180, 700)
        done: list[int] = []

        def type_query() -> None:
            if window.dialogs.models_hub().machine is None:
                QTimer.singleShot(100, type_query)
                return
            browser.discover.search_box.setText("qwen3")
            browser.discover.search_box.returnPressed.emit()
            QTimer.singleShot(300, shoot)

        def shoot() -> None:
            rows = browser.discover.results.rows.rows
            if len(rows) < len(REPOS) or any("working out" in row.text for row in rows):
                QTimer.singleShot(200, shoot)
                return
            browser.discover.results.select_key("Qwen/Qwen3-8B")
            app.processEvents()
            QTimer.singleShot(300, grab)

        def grab() -> None:
            screen = app.primaryScreen().grabWindow(0)  # the X server's pixels, with the window manager's frame
            screen.copy(browser.frameGeometry()).save(str(out))
            print(f"screenshot: saved {out}")
            browser.reject()
            window.close()
            done.append(0)

        return run_until_done(loop, done, type_query)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshot-models.png").resolve()))
