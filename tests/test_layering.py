"""Imports go down or sideways only: core ← engine ← (server, ui, commands); no Qt below ui; no circles.

The scan parses app/ in a fresh process (CPython 3.11.7's ast.parse can fail spuriously while other
threads run, gh-106905, and earlier tests leave threads behind) and prints the import graph; the rules
are checked here. Every import counts: lazy ones inside functions, and type-only ones under
``if TYPE_CHECKING:`` too. Those never run, but the file still names the other one's insides: a circle that
only mypy walks ties the two files together as much as one that runs (MainWindow and its menus once did).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[1] / "app"
QT = ("PySide6", "shiboken6", "qasync")

# What each folder may import from app/. The top-level entry points (app/__main__.py, app/cli.py) may import anything.
ALLOWED = {
    "core": {"core"},
    "engine": {"core", "engine"},
    "server": {"core", "engine", "server"},
    "tools": {"core", "tools"},  # MCP servers for the window's tool calls, on their own loop thread
    "ui": {"core", "engine", "server", "tools", "ui"},
    "commands": {"core", "engine", "server", "tools", "ui", "commands"},  # `nalar` runs the window
}
# Inside a folder: what each part may import from its own folder. A part is a subfolder (engine/reply) or a
# module at the folder's top (engine/events). Parts not named here are free within their folder.
CONTRACT = {"engine.events", "engine.errors", "engine.requests"}  # plain data every engine part shares
INSIDE = {
    # Reply text knows nothing of where the tokens come from.
    "engine.reply": {"engine.reply"} | CONTRACT,
    "engine.machine": {"engine.machine"} | CONTRACT,
    # vLLM's host runs inside the engine process, but knows nothing of the pipe.
    "engine.local": {"engine.local", "engine.reply", "engine.machine", "engine.base"} | CONTRACT,
    "engine.process": {"engine.process", "engine.local", "engine.reply", "engine.machine", "engine.base"} | CONTRACT,
    "engine.remote": {"engine.remote", "engine.reply", "engine.base"} | CONTRACT,
    "engine.events": CONTRACT,
    "engine.errors": CONTRACT,
    "engine.requests": CONTRACT,
    "engine.base": {"engine.reply"} | CONTRACT,
    "engine.scripted": {"engine.reply", "engine.base"} | CONTRACT,
    "core.settings": {"core.settings"},
    "core.chat": {"core.chat", "core.settings", "core.priority", "core.safe_files"},  # leaves (stdlib only)
    "core.steering": {"core.steering", "core.chat", "core.settings"},  # builds on conversations, never under them
    "core.models": {"core.models", "core.settings", "core.safe_files"},
    # The hub front door builds on the planner and the downloader, never under them.
    "core.hub": {"core.hub", "core.models", "core.settings", "core.safe_files"},
    # Where a name from outside may be written, how a handed-over file is read: a leaf every writer can use.
    "core.safe_files": {"core.safe_files"},
    "core.measure": {"core.measure", "core.models", "core.settings"},
    # Knowledge collections read files with the attachments' readers and search with the history's query rules.
    "core.knowledge": {"core.knowledge", "core.chat", "core.settings", "core.safe_files"},
    # Controllers hold state and talk to the engine; they build no widget.
    "ui.controllers": {"ui.controllers"},
    "ui.chat": {"ui.chat", "ui.controllers"},
    "ui.dialogs": {"ui.dialogs", "ui.chat", "ui.controllers"},
}
# The one way into ui/ from commands/: the window's start-up, for `nalar` itself and for `nalar bench ui`.
UI_ENTRY = "app.ui.app_main"
UI_ENTRY_USERS = {"app.commands.cli", "app.commands.window_bench.harness"}
# Which folders may import Qt: the window, and the one command that benchmarks it.
QT_ALLOWED = {"ui"}
QT_ALLOWED_MODULES = {"app.commands.window_bench.harness"}

SCAN = r"""
import ast, json, sys
from pathlib import Path

root = Path(sys.argv[1])
package = root.name
modules = {}
for source in sorted(root.rglob("*.py")):
    parts = list(source.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    modules[".".join(parts)] = source


graph = {}
for name, source in modules.items():
    tree = ast.parse(source.read_text(encoding="utf-8"))
    is_package = source.name == "__init__.py"
    found = set()
    for node in ast.walk(tree):  # every node: module level, function bodies, `if TYPE_CHECKING:` blocks
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in modules else base)
    graph[name] = sorted(found)
print(json.dumps(graph))
"""


def import_graph(root: Path) -> dict[str, list[str]]:
    """Every module under ``root`` (a package folder) and what it imports, by full module name."""
    result = subprocess.run([sys.executable, "-c", SCAN, str(root)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def _folder(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ALLOWED) else None


def wrong_way_imports(graph: dict[str, list[str]]) -> list[str]:
    """Imports that go up a layer, or bring Qt below the window."""
    package = next(iter(graph)).split(".")[0]
    problems = []
    for module, imported in graph.items():
        folder = _folder(module)
        if folder is None:
            continue  # an entry point at the package's top
        for name in imported:
            top = name.split(".")[0]
            if top in QT and folder not in QT_ALLOWED and module not in QT_ALLOWED_MODULES:
                problems.append(f"{module} imports Qt ({name})")
            elif top == package and (target := _folder(name)) is not None and target not in ALLOWED.get(folder, set()):
                problems.append(f"{module} imports {name}: {folder}/ must not import {target}/")
    return problems


def _part(module: str) -> str | None:
    """``app.engine.reply.stream`` → ``engine.reply``; ``app.engine.events`` → ``engine.events``."""
    parts = module.split(".")
    return ".".join(parts[1:3]) if len(parts) >= 3 else None


def wrong_way_inside(graph: dict[str, list[str]]) -> list[str]:
    """Imports between the parts of one folder that INSIDE does not allow."""
    problems = []
    for module, imported in graph.items():
        part = _part(module)
        if part not in INSIDE:
            continue
        for name in imported:
            target = _part(name)
            if target and target.split(".")[0] == part.split(".")[0] and target not in INSIDE[part]:
                problems.append(f"{module} imports {name}: {part} must not import {target}")
    return problems


def import_circles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each a circle of imports."""
    edges = {m: [n for n in imported if n in graph and n != m] for m, imported in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(start: str) -> None:  # iterative: a deep graph must not hit the recursion limit
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        circles.append(sorted(group))

    for module in edges:
        if module not in index:
            visit(module)
    return circles


@pytest.fixture(scope="module")
def app_graph() -> dict[str, list[str]]:
    return import_graph(APP)


def test_no_import_goes_up_a_layer_or_brings_qt_below_the_window(app_graph: dict[str, list[str]]) -> None:
    """Bug caught: process_server imported commands.cli (configure_logging) and commands.bench (raw_run), so the
    engine process depended on the CLI and a benchmark rode the production pipe; engine code importing Qt can't
    run in `nalar doctor` or the engine process without a display."""
    assert wrong_way_imports(app_graph) == []


def commands_into_the_window(graph: dict[str, list[str]]) -> list[str]:
    """Imports from commands/ into ui/ other than the start-up entry, or from a command that isn't its user."""
    return [f"{module} imports {name}" for module, imported in graph.items() if _folder(module) == "commands"
            for name in imported if _folder(name) == "ui"
            and (name != UI_ENTRY or module not in UI_ENTRY_USERS)]


def test_commands_reach_the_window_only_through_its_start_up(app_graph: dict[str, list[str]]) -> None:
    """Bug caught: `nalar bench ui` built its own QApplication and qasync loop (a copy of app_main) and imported
    MainWindow and ChatView, so a change to the start-up or the window's insides broke the benchmark unseen."""
    wrong = commands_into_the_window(app_graph)
    assert wrong == [], f"commands/ reaches ui/ only through {UI_ENTRY}, from {sorted(UI_ENTRY_USERS)}: {wrong}"
    assert commands_into_the_window({"app.commands.bench": ["app.ui.main_window"],
                                     "app.commands.doctor": [UI_ENTRY], "app.commands.cli": ["app.ui"]}) == [
        "app.commands.bench imports app.ui.main_window", f"app.commands.doctor imports {UI_ENTRY}",
        "app.commands.cli imports app.ui"]
    used = {module for module, imported in app_graph.items() if UI_ENTRY in imported}
    assert UI_ENTRY in app_graph and used >= UI_ENTRY_USERS, "the entry the rule names is the one the commands use"


def test_each_folder_keeps_its_parts_apart(app_graph: dict[str, list[str]]) -> None:
    """Bugs caught: the host importing the pipe's orphan tracking (engine/local → engine/process, a circle of
    folders), reply text importing the engine base class to get a dataclass, a controller importing a widget
    module, the planner importing a benchmark."""
    assert wrong_way_inside(app_graph) == []


def test_the_inside_rules_catch_a_part_that_reaches_across(tmp_path: Path) -> None:
    """The checker itself, on a small tree: reply → local and controllers → chat are named, reply → events isn't."""
    files = {
        "__init__.py": "", "engine/__init__.py": "", "engine/events.py": "", "engine/reply/__init__.py": "",
        "engine/reply/stream.py": "from app.engine.events import X\nfrom app.engine.local.host import H\n",
        "engine/local/__init__.py": "", "engine/local/host.py": "",
        "ui/__init__.py": "", "ui/chat/__init__.py": "", "ui/chat/panes.py": "",
        "ui/controllers/__init__.py": "", "ui/controllers/session.py": "from app.ui.chat import panes\n",
    }
    root = tmp_path / "app"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    assert sorted(wrong_way_inside(import_graph(root))) == [
        "app.engine.reply.stream imports app.engine.local.host: engine.reply must not import engine.local",
        "app.ui.controllers.session imports app.ui.chat.panes: ui.controllers must not import ui.chat"]


OLD_TREE = "4572730b4f945972daf7c42d2a0a335ec138c8dd"  # before the layering test: engine → commands → ui → engine


def test_the_old_tree_still_shows_its_circle(tmp_path: Path) -> None:
    """The checks still find the circle of the tree they were written against, read from git history."""
    root = APP.parent
    has = subprocess.run(["git", "cat-file", "-e", f"{OLD_TREE}^{{tree}}"], cwd=root, capture_output=True)
    if has.returncode != 0:
        pytest.skip(f"this checkout has no commit {OLD_TREE[:12]} (a shallow clone)")
    archive = subprocess.run(["git", "archive", OLD_TREE, "app"], cwd=root, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    graph = import_graph(tmp_path / "app")
    circles = import_circles(graph)
    circle = {"app.engine.process_server", "app.commands.cli", "app.ui.main_window"}
    assert any(circle <= set(c) for c in circles), circles
    assert any("engine/ must not import commands/" in p for p in wrong_way_imports(graph))


def circle_ties(graph: dict[str, list[str]], circle: list[str]) -> list[str]:
    """The imports that hold a circle together, ``a → b`` each: what to cut to open it."""
    members = set(circle)
    return [f"{module} → {name}" for module in circle for name in graph[module] if name in members and name != module]


def test_no_circle_of_imports(app_graph: dict[str, list[str]]) -> None:
    """Bugs caught: the 11-file circle engine → commands → ui → engine that the arrow back up made; the 5-file
    circle of MainWindow, its menus, the action table, the conversation actions and Compare (each took the window,
    imported under TYPE_CHECKING); chat_settings ↔ conversation (a type-only import one way)."""
    circles = [circle_ties(app_graph, circle) for circle in import_circles(app_graph)]
    assert circles == [], "import circles, each by the imports that tie it:\n" + "\n".join(
        f"circle {n}: " + "; ".join(ties) for n, ties in enumerate(circles, 1))


def test_the_scan_sees_every_folder(app_graph: dict[str, list[str]]) -> None:
    """A scan that found nothing would pass the rules above."""
    folders = {_folder(m) for m in app_graph}
    assert {"core", "engine", "tools", "ui", "commands"} <= folders and len(app_graph) > 50


FIXTURE = {
    "__init__.py": "",
    "core/__init__.py": "",
    "core/paths.py": "import os\n",
    "engine/__init__.py": "",
    "engine/host.py": "from app.core import paths\n",
    "engine/process_server.py": "def serve():\n    from app.commands.cli import configure_logging\n",
    "engine/widgets.py": "from PySide6.QtCore import QObject\n",
    "engine/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.ui.window import Window\n",
    "commands/__init__.py": "",
    "commands/cli.py": "from app.engine import host\nfrom .bench import run\n",
    "commands/bench.py": "def run():\n    from app.commands import cli\n",
    "commands/doctor.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.ui.menus import Menus\n",
    "ui/__init__.py": "",
    "ui/window.py": "from ..engine.host import x\nfrom .menus import Menus\n",
    "ui/menus.py": "from __future__ import annotations\nimport typing\nif typing.TYPE_CHECKING:\n"
                   "    from app.ui.window import Window\n",
}


def test_the_rules_catch_an_import_added_back(tmp_path: Path) -> None:
    """The checker itself: on a small tree with each kind of wrong import, it names each one, and only those
    (lazy and TYPE_CHECKING imports count, relative imports resolve); a circle closed only by a lazy import
    (bench ⇄ cli) or only by a type-only one (menus ⇄ window) is named with the imports that tie it."""
    root = tmp_path / "app"
    for name, text in FIXTURE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    graph = import_graph(root)
    assert graph["app.ui.window"] == ["app.engine.host", "app.ui.menus"]
    assert sorted(wrong_way_imports(graph)) == [
        "app.engine.process_server imports app.commands.cli: engine/ must not import commands/",
        "app.engine.typed imports app.ui.window: engine/ must not import ui/",
        "app.engine.widgets imports Qt (PySide6.QtCore)"]
    circles = import_circles(graph)
    assert sorted(circles) == [["app.commands.bench", "app.commands.cli"], ["app.ui.menus", "app.ui.window"]]
    assert sorted(circle_ties(graph, c) for c in circles) == [
        ["app.commands.bench → app.commands.cli", "app.commands.cli → app.commands.bench"],
        ["app.ui.menus → app.ui.window", "app.ui.window → app.ui.menus"]]
    assert commands_into_the_window(graph) == ["app.commands.doctor imports app.ui.menus"]
