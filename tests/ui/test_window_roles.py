"""MainWindow is layout and wiring: it forwards nothing to the objects that own the state.

Tests, benches and dialogs reach the controller (engine, settings), the session (conversations, the reply),
the dialogs, the menus and the widgets that own their state. A forwarder on the window (``window.settings``
returning ``controller.settings``, ``window.thinking_pane`` aliasing ``chat_view.thinking_pane``) gives
every caller two ways in, and the next change updates one of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

MAIN_WINDOW = Path(__file__).resolve().parents[2] / "app" / "ui" / "main_window.py"
# The forwarders and aliases this window once had (issue 28): none may come back under its old name.
REMOVED = ("bridge", "settings", "conversation", "streaming", "engine_ready", "start_engine", "apply_settings",
           "sync_tool_servers", "open_settings", "open_model_chooser", "export_conversation", "measure_dialog",
           "transcript", "thinking_pane", "answer_pane", "send_button", "think_switch", "stop_button",
           "answer_now_button", "regenerate_button", "copy_button", "status_label", "api_label", "new_conversation",
           "regenerate")


def _self_chain(node: ast.AST) -> list[str] | None:
    """``self.a.b`` → ["a", "b"]; None for anything that is not an attribute chain on self."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.insert(0, node.attr)
        node = node.value
    return names if isinstance(node, ast.Name) and node.id == "self" else None


def forwarders(source: str) -> list[str]:
    """What in MainWindow only hands on another object's member: a method or property whose body is
    ``return self.x.y`` or ``return self.x.y(...)`` with the same arguments, and ``self.a = self.x.y`` aliases."""
    tree = ast.parse(source)
    window = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "MainWindow")
    found: list[str] = []
    for node in ast.walk(window):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = [stmt for stmt in node.body
                    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))]  # a docstring
            if len(body) != 1 or not isinstance(body[0], (ast.Return, ast.Expr)) or body[0].value is None:
                continue
            value = body[0].value
            if isinstance(value, ast.Await):
                value = value.value
            target = value.func if isinstance(value, ast.Call) else value
            chain = _self_chain(target)
            params = [arg.arg for arg in node.args.args[1:] + node.args.kwonlyargs]
            passed = [a.id for a in value.args if isinstance(a, ast.Name)] + [k.value.id for k in value.keywords
                                                                               if isinstance(k.value, ast.Name)] \
                if isinstance(value, ast.Call) else []
            if chain is not None and len(chain) >= 2 and sorted(passed) == sorted(params):
                found.append(f"{node.name} → self.{'.'.join(chain)}")
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            targets = node.targets[0].elts if isinstance(node.targets[0], ast.Tuple) else [node.targets[0]]
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for target, value in zip(targets, values):
                chain = _self_chain(value)
                if _self_chain(target) is not None and chain is not None and len(chain) >= 2:
                    found.append(f"self.{'.'.join(_self_chain(target) or [])} = self.{'.'.join(chain)}")
    return found


def test_main_window_forwards_nothing() -> None:
    """Bug caught: a forwarder or alias added back to MainWindow (``def settings(self): return
    self.controller.settings``, ``self.send_button = self.controls.send_button``), so callers again reach
    the state through the window instead of the object that owns it."""
    assert forwarders(MAIN_WINDOW.read_text()) == []


def test_the_check_finds_a_forwarder_and_an_alias() -> None:
    """Bug caught: the check above passing whatever the window holds (it must see the shapes it forbids)."""
    source = MAIN_WINDOW.read_text().replace(
        "    def refresh_state(self) -> None:",
        "    @property\n    def settings(self):\n        return self.controller.settings\n\n"
        "    def open_settings(self):\n        return self.dialogs.open_settings()\n\n"
        "    def refresh_state(self) -> None:", 1)
    alias = "        self.answer_pane = self.chat_view.answer_pane\n"
    source = source.replace("        self.banner = ErrorBanner()", alias + "        self.banner = ErrorBanner()", 1)
    assert sorted(forwarders(source)) == ["open_settings → self.dialogs.open_settings",
                                          "self.answer_pane = self.chat_view.answer_pane",
                                          "settings → self.controller.settings"]


def test_the_removed_names_are_not_on_a_built_window(qtbot, make_window) -> None:
    """Bug caught: one of the old forwarders or aliases back on the window under its old name, whatever its shape."""
    window = make_window(start=False)
    assert [name for name in REMOVED if hasattr(window, name)] == []
