"""Files whose names or nature come from outside: where a name a server gives may be written, and how a
file the user hands over is read without trusting what it is.

``safe_child`` is the one check for a name from outside (a hub's or a mirror's file listing, a title turned
into a file name): a server that lists ``../../.bashrc`` must not decide where Nalar writes. ``read_regular``
reads a file the user picked or dropped: a symlink to ``/dev/zero`` or a FIFO named ``notes.txt`` is refused,
not read until memory runs out or waited on for ever.

Stdlib only: core/chat and core/models both use it.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import unicodedata
from collections.abc import Iterator
from pathlib import Path, PurePosixPath, PureWindowsPath

MAX_PART_BYTES = 255  # one path component, in bytes (ext4, btrfs, NTFS in UTF-16 units)
MAX_NAME_CHARS = 4096  # a whole relative name (Linux's PATH_MAX)
_UNSAFE_IN_FILE_NAME = re.compile(r'[\x00-\x1f\x7f-\x9f/\\:*?"<>|]+')


class UnsafeName(ValueError):
    """A file name from outside that Nalar refuses to write: ``reason`` says which rule it breaks."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"the file name {name!r} was refused: {reason}")
        self.name, self.reason = name, reason


class NotRegularFile(ValueError):
    """Not a plain file (a FIFO, a device such as /dev/zero, a socket, a folder): never read."""

    def __init__(self, name: str, kind: str) -> None:
        super().__init__(f"{name} is {kind}, not a regular file")
        self.name, self.kind = name, kind


class FileTooLarge(ValueError):
    """More than the caller's limit; ``size`` is what the file said it holds (or the bytes seen past the limit)."""

    def __init__(self, name: str, size: int, limit: int) -> None:
        super().__init__(f"{name} holds {size} bytes, over the {limit} read")
        self.name, self.size, self.limit = name, size, limit


def _name_problem(name: object) -> str | None:
    """Why ``name`` can't be a relative path below a folder, or None. Only the text is looked at."""
    if not isinstance(name, str) or not name:
        return "it is empty" if name == "" else "it is not text"
    if len(name) > MAX_NAME_CHARS:
        return f"it is longer than {MAX_NAME_CHARS} characters"
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in name):
        return "it holds a control character (NUL, a newline…) or an unpaired surrogate"
    if "\\" in name:
        return "it holds a backslash (a Windows path separator)"
    if name.startswith("/") or PurePosixPath(name).is_absolute():
        return "it is an absolute path"
    windows = PureWindowsPath(name)
    if windows.drive or windows.root:
        return "it names a drive or a network share"
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "it has an empty, '.' or '..' part"
    if any(len(part.encode("utf-8", "surrogatepass")) > MAX_PART_BYTES for part in parts):
        return f"a part of it is longer than {MAX_PART_BYTES} bytes"
    return None


def safe_child(root: Path, name: str) -> Path:
    """``root / name`` for a ``/``-separated relative name from outside, or UnsafeName naming it.

    Refused: an absolute path, a drive or share, a ``..`` (or ``.`` or empty) part, a backslash, NUL and other
    control characters, and a symlink anywhere below ``root`` on the way (each existing part is checked with
    lstat, the last one too, so a link planted in the folder can't send a write elsewhere). The result, resolved,
    must lie inside ``root`` resolved. ``root`` itself may be (or sit under) a symlink: that is the user's choice.
    """
    if (problem := _name_problem(name)) is not None:
        raise UnsafeName(str(name), problem)
    parts = name.split("/")
    at = Path(root)
    for part in parts:
        at = at / part
        try:
            mode = os.lstat(at).st_mode
        except FileNotFoundError:
            break  # nothing below a missing part exists either
        except OSError as exc:
            raise UnsafeName(name, f"{at} can't be checked ({exc.strerror or exc})") from None
        if stat.S_ISLNK(mode):
            raise UnsafeName(name, f"{at.relative_to(root)} is a symbolic link")
    target = Path(root).joinpath(*parts)
    inside = Path(root).resolve()
    if not target.resolve().is_relative_to(inside):
        raise UnsafeName(name, f"it leads outside {root}")
    return target


def safe_file_name(text: str, fallback: str, *, max_chars: int = 80) -> str:
    """One path component made from free text (a conversation's title for an export's suggested name): separators,
    control characters and characters Windows forbids become ``-``; nothing left gives ``fallback``."""
    cleaned = _UNSAFE_IN_FILE_NAME.sub("-", "".join(c for c in text if unicodedata.category(c) != "Cs"))
    cleaned = cleaned.strip(" .-")[:max_chars].strip(" .")
    return cleaned if cleaned and _name_problem(cleaned) is None else fallback


def file_kind(mode: int) -> str:
    """What a file that isn't regular is, in words ("a pipe (FIFO)"), for messages that name it."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a plain file"


@contextlib.contextmanager
def opened_regular(path: Path, *, follow_symlinks: bool = True) -> Iterator[tuple[int, os.stat_result]]:
    """The open descriptor of the regular file at ``path``, and its fstat; closed after the block.

    Opened with O_NONBLOCK (opening a FIFO would otherwise wait for a writer for ever), then checked with fstat
    on what was opened, not on the name (a symlink to /dev/zero is a device there): anything but a regular file
    is NotRegularFile. OSError when it can't be opened. ``follow_symlinks=False`` refuses a symlink as the last part
    (ELOOP), for a caller that walked a folder without following links: a file swapped for a link after the walk is
    not read.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(path.name, file_kind(info.st_mode))
        yield fd, info
    finally:
        os.close(fd)


def read_regular(path: Path, limit: int, *, follow_symlinks: bool = True) -> bytes:
    """The bytes of the regular file at ``path`` (``opened_regular``), at most ``limit`` of them, else FileTooLarge.
    At most ``limit`` + 1 bytes are read, so a file that grows past its size is caught too. OSError when it can't be
    opened or read."""
    with opened_regular(path, follow_symlinks=follow_symlinks) as (fd, info):
        if info.st_size > limit:
            raise FileTooLarge(path.name, info.st_size, limit)
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise FileTooLarge(path.name, max(info.st_size, len(data)), limit)
        return data
