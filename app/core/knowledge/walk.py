"""The files of a collection's folders, found without ever leaving them.

``os.scandir`` without following links: a link is never walked into, and is listed as skipped with where it leads
(outside the folders, a loop, a folder, or a file indexed under its own name). Hidden entries (".git",
".venv", ".DS_Store") are left out and listed once each; FIFOs, sockets and devices are listed, never opened.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.core.knowledge.reader import indexed_kind
from app.core.knowledge.store import SkippedFile
from app.core.safe_files import file_kind

MAX_FILES = 200_000  # a collection of a whole disk stops here, said in the skipped list


@dataclass(frozen=True)
class Found:
    """A file to index: its path, its kind ("text" or "pdf"), and its size and mtime as the walk saw them."""

    path: Path
    kind: str
    size: int
    mtime_ns: int


@dataclass
class Walked:
    found: dict[Path, Found]
    skipped: dict[Path, SkippedFile]
    folders_missing: list[Path]
    cancelled: bool = False


def _link_reason(path: Path, folders: tuple[Path, ...]) -> str:
    try:
        target = path.resolve(strict=True)
    except RuntimeError:
        return "symbolic link loop"
    except OSError as exc:
        if exc.errno == 40:  # ELOOP
            return "symbolic link loop"
        return f"symbolic link to nothing ({os.readlink(path) if path.is_symlink() else exc.strerror})"
    if not any(target.is_relative_to(folder) for folder in folders):
        return f"symbolic link leading outside the collection's folders (to {target})"
    if target.is_dir():
        return "symbolic link to a folder: not followed"
    return f"symbolic link to {target}, indexed under that name"


def walk(folders: tuple[Path, ...], cancelled: Callable[[], bool] = lambda: False) -> Walked:
    """Every file under ``folders`` a collection reads, and every entry skipped with its reason."""
    out = Walked({}, {}, [])
    stack = [folder for folder in reversed(folders)]
    seen_dirs: set[tuple[int, int]] = set()
    while stack:
        if cancelled():
            out.cancelled = True
            return out
        folder = stack.pop()
        try:
            info = os.stat(folder, follow_symlinks=False)
            if (info.st_dev, info.st_ino) in seen_dirs:  # a folder given twice, or one inside another
                continue
            seen_dirs.add((info.st_dev, info.st_ino))
            with os.scandir(folder) as entries:
                listed = sorted(entries, key=lambda entry: entry.name)
        except FileNotFoundError:
            if folder in folders:
                out.folders_missing.append(folder)
            continue
        except OSError as exc:
            out.skipped[folder] = SkippedFile(folder, f"folder can't be read ({exc.strerror or exc})")
            continue
        for entry in listed:
            path = Path(entry.path)
            if entry.name.startswith("."):
                out.skipped[path] = SkippedFile(path, "hidden: names starting with '.' are not indexed")
            elif entry.is_symlink():
                out.skipped[path] = SkippedFile(path, _link_reason(path, folders))
            elif entry.is_dir(follow_symlinks=False):
                stack.append(path)
            elif len(out.found) >= MAX_FILES:
                out.skipped[path] = SkippedFile(path, f"past the {MAX_FILES:,} files a collection indexes")
            else:
                _file(entry, path, out)
    return out


def _file(entry: os.DirEntry[str], path: Path, out: Walked) -> None:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError as exc:
        out.skipped[path] = SkippedFile(path, f"can't be examined ({exc.strerror or exc})")
        return
    if not stat.S_ISREG(info.st_mode):
        out.skipped[path] = SkippedFile(path, f"not a regular file: {file_kind(info.st_mode)}")
        return
    kind = indexed_kind(entry.name)
    if kind is None:
        suffix = os.path.splitext(entry.name)[1] or "no suffix"
        out.skipped[path] = SkippedFile(path, f"not a kind Nalar indexes ({suffix}): text, Markdown, code and PDF are")
        return
    out.found[path] = Found(path, kind, info.st_size, info.st_mtime_ns)
