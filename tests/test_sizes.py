"""No god objects: every class in app/ stays under 200 lines and 20 public methods, and no folder holds more
than 12 modules, so a newcomer can read one role at a time."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"
MAX_CLASS_LINES = 200
MAX_PUBLIC_METHODS = 20
MAX_MODULES_PER_FOLDER = 12


def oversized_classes(root: Path) -> list[str]:
    found = []
    for source in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            public = [n for n in node.body
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_")]
            if lines > MAX_CLASS_LINES or len(public) > MAX_PUBLIC_METHODS:
                found.append(f"{source.relative_to(root.parent)}:{node.lineno} {node.name}: "
                             f"{lines} lines, {len(public)} public methods")
    return found


def crowded_folders(root: Path) -> list[str]:
    return [f"{folder.relative_to(root.parent)}: {count} modules"
            for folder in sorted(p for p in root.rglob("*") if p.is_dir() and p.name != "__pycache__")
            if (count := len(list(folder.glob("*.py")))) > MAX_MODULES_PER_FOLDER]


def test_no_class_is_a_god_object() -> None:
    """Bug caught: ChatSession grew to 384 lines and 21 public methods (conversation CRUD, the reply, tool
    rounds, a relay of every delta and saving in one class), and EngineHost to 346."""
    assert oversized_classes(APP) == []


def test_no_folder_is_flat() -> None:
    """Bug caught: app/engine held 29 modules with five roles and nothing to say which was which."""
    assert crowded_folders(APP) == []


def test_the_checks_see_a_god_object_and_a_flat_folder(tmp_path: Path) -> None:
    """The checker itself: a 201-line class, a class with 21 public methods and a 13-module folder are named."""
    root = tmp_path / "app"
    (root / "flat").mkdir(parents=True)
    for n in range(13):
        (root / "flat" / f"m{n}.py").write_text("")
    long_body = "\n".join(f"    x{n} = {n}" for n in range(200))
    methods = "\n".join(f"    def m{n}(self): pass" for n in range(21))
    (root / "big.py").write_text(f"class Long:\n{long_body}\n\n\nclass Wide:\n{methods}\n\n\nclass Fine:\n    pass\n")
    assert [line.split(" ")[1] for line in oversized_classes(root)] == ["Long:", "Wide:"]
    assert crowded_folders(root) == ["app/flat: 13 modules"]
