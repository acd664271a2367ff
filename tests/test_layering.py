"""Imports go down or sideways only: core ← engine ← (server, ui, commands); no Qt below ui; no circles.

The scan parses app/ in a fresh process (CPython 3.11.7's ast.parse can fail spuriously while other
threads run, gh-106905, and earlier tests leave threads behind) and prints the import graph; the rules
are checked here. Every import counts, lazy ones inside functions too, except those under
``if TYPE_CHECKING:`` (they never run).
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
    "tools": {"core", "engine", "tools"},  # MCP servers for the window's tool calls, on their own loop thread
    "ui": {"core", "engine", "server", "tools", "ui"},
    "commands": {"core", "engine", "server", "tools", "ui", "commands"},  # `nalar` runs the window
}
# Which folders may import Qt: the window, and the one command that benchmarks it.
QT_ALLOWED = {"ui"}
QT_ALLOWED_MODULES = {"app.commands.bench"}

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


def type_checking_only(tree):
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skip.update(id(n) for n in ast.walk(inner))
    return skip


graph = {}
for name, source in modules.items():
    tree = ast.parse(source.read_text(encoding="utf-8"))
    skip = type_checking_only(tree)
    is_package = source.name == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
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


def test_no_circle_of_imports(app_graph: dict[str, list[str]]) -> None:
    """Bug caught: the 11-file circle engine → commands → ui → engine that the arrow back up made."""
    assert import_circles(app_graph) == []


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
    "commands/bench.py": "from app.commands import cli\n",
    "ui/__init__.py": "",
    "ui/window.py": "from ..engine.host import x\n",
}


def test_the_rules_catch_an_import_added_back(tmp_path: Path) -> None:
    """The checker itself: on a small tree with each kind of wrong import, it names each one, and only those
    (a lazy import counts, a TYPE_CHECKING one doesn't, relative imports resolve)."""
    root = tmp_path / "app"
    for name, text in FIXTURE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    graph = import_graph(root)
    assert graph["app.ui.window"] == ["app.engine.host"]
    assert sorted(wrong_way_imports(graph)) == [
        "app.engine.process_server imports app.commands.cli: engine/ must not import commands/",
        "app.engine.widgets imports Qt (PySide6.QtCore)"]
    assert import_circles(graph) == [["app.commands.bench", "app.commands.cli"]]
