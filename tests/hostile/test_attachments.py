"""Hostile files as attachments: special files behind an ordinary name, and text that does not decode.

A ``.txt`` linking to /dev/zero or /dev/urandom was read until MemoryError, a FIFO blocked the window for
ever, and a BOM followed by bad bytes raised a UnicodeDecodeError past every handler. Each must be refused
with the AttachmentError the attachments bar turns into a banner naming the file, and the other files of the
same drop still attached.
"""

from __future__ import annotations

import codecs
import os
import struct
import threading
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from app.core.chat import attachments
from app.core.chat.attachments import AttachmentError, read_attachment
from app.core.safe_files import FileTooLarge, NotRegularFile, read_regular
from app.ui.chat.attachments_bar import AttachmentsBar

READ_DEADLINE_S = 20.0  # a hang guard only: each read here returns in milliseconds


def fifo(folder: Path) -> Path:
    path = folder / "notes.txt"
    os.mkfifo(path)
    return path


def linked(target: str, name: str) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        path = folder / name
        path.symlink_to(target)
        return path
    return make


def written(name: str, data: bytes) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        (folder / name).write_bytes(data)
        return folder / name
    return make


def png_header(width: int, height: int) -> bytes:
    """A PNG's signature and IHDR only: enough for Pillow to read the claimed size."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))


HOSTILE = {
    "fifo": (fifo, "pipe (FIFO)"),
    "dev-zero-link": (linked("/dev/zero", "zeros.txt"), "a device"),
    "dev-urandom-link": (linked("/dev/urandom", "random.txt"), "a device"),
    "folder": (lambda d: (d / "folder.txt").mkdir() or d / "folder.txt", "a folder"),
    "utf8-bom-bad-bytes": (written("bom8.txt", codecs.BOM_UTF8 + b"ok \xff\xfe\xfd"), "not UTF-8 text"),
    "utf16-bom-odd-length": (written("bom16.txt", codecs.BOM_UTF16_LE + b"a\x00b"), "not UTF-16 text"),
    "utf16-bom-lone-surrogate": (written("surrogate.txt", codecs.BOM_UTF16_LE + b"\x00\xd8a\x00"),
                                 "not UTF-16 text"),
}


def read_with_a_hang_guard(path: Path) -> BaseException | object:
    """read_attachment on a thread; a FIFO left blocked is released by opening its write end."""
    outcome: list[BaseException | object] = []

    def read() -> None:
        try:
            outcome.append(read_attachment(path))
        except BaseException as exc:  # noqa: BLE001 - the test inspects what came out
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(READ_DEADLINE_S)
    if reader.is_alive() and path.is_fifo():
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # unblocks the reader's open
        reader.join(READ_DEADLINE_S)
        pytest.fail(f"reading {path.name} blocked for {READ_DEADLINE_S} s")
    assert not reader.is_alive(), f"reading {path.name} did not end"
    return outcome[0]


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_special_or_undecodable_file_is_refused_with_its_name(tmp_path: Path, case: str) -> None:
    """Bugs caught: a FIFO named notes.txt blocked the GUI thread for ever; a .txt linking to /dev/zero or
    /dev/urandom was read until MemoryError; a BOM followed by bytes that don't decode (bad UTF-8, odd-length or
    lone-surrogate UTF-16) raised UnicodeDecodeError past the attachments bar."""
    make, problem = HOSTILE[case]
    path = make(tmp_path)
    outcome = read_with_a_hang_guard(path)
    assert isinstance(outcome, AttachmentError), outcome
    assert outcome.name == path.name and problem in outcome.problem and outcome.fix


def test_at_most_the_limit_plus_one_byte_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug caught: the size was taken from stat and then the whole file read, so a file that grows between the
    two (or claims 0 bytes, as /proc files do) was read whole."""
    reads: list[int] = []  # the bytes each os.read returned
    real_read = os.read

    def counted_read(fd: int, count: int) -> bytes:
        data = real_read(fd, count)
        reads.append(len(data))
        return data

    monkeypatch.setattr(os, "read", counted_read)
    big = tmp_path / "big.log"
    big.write_bytes(b"x" * 5000)
    with pytest.raises(FileTooLarge):
        read_regular(big, 4096)
    assert sum(reads) <= 4097
    reads.clear()
    assert read_regular(big, 5000) == b"x" * 5000 and sum(reads) == 5000
    monkeypatch.setattr(attachments, "MAX_FILE_BYTES", 1024)
    with pytest.raises(AttachmentError, match="over the"):
        read_attachment(big)
    with pytest.raises(NotRegularFile, match="a device"):
        read_regular(Path("/dev/zero"), 10)


def test_the_bar_shows_each_refusal_by_name_and_attaches_the_rest(qtbot, tmp_path: Path) -> None:
    """Bugs caught: the first special file of a drop hung the window or raised past ``add_paths``, so the files
    after it were never attached and no banner named it; a .png linking to /dev/zero was read whole, and a PNG
    claiming 30000×30000 pixels raised Pillow's DecompressionBombError past the bar."""
    bar = AttachmentsBar()
    qtbot.addWidget(bar)
    bar.image_refusal = None  # a vision model is loaded: images are read
    refusals: list[tuple[str, str]] = []
    bar.refused.connect(lambda problem, fix: refusals.append((problem, fix)))
    good = written("good.md", b"# fine\n")(tmp_path)
    hostile = [HOSTILE[case][0](tmp_path) for case in ("dev-zero-link", "utf8-bom-bad-bytes", "utf16-bom-odd-length")]
    images = [linked("/dev/zero", "zeros.png")(tmp_path), written("bomb.png", png_header(30000, 30000))(tmp_path)]
    (tmp_path / "pipe").mkdir()
    pipe = fifo(tmp_path / "pipe")
    done = threading.Event()

    def release_the_fifo() -> None:  # a hang guard: if the bar blocks opening the FIFO, a writer releases it
        if not done.wait(READ_DEADLINE_S):
            try:
                os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # no reader has it open (ENXIO): nothing to release
                pass

    threading.Thread(target=release_the_fifo, daemon=True).start()
    try:
        bar.add_paths([*hostile, pipe, *images, good])
    finally:
        done.set()
    assert [a.name for a in bar.attachments] == ["good.md"] and bar.images == []
    names = [path.name for path in [*hostile, pipe, *images]]
    assert len(refusals) == len(names)
    for name, (problem, fix) in zip(names, refusals, strict=True):
        assert problem.startswith(f"{name} was not attached: ") and fix
