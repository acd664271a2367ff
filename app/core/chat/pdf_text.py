"""A PDF's text, read by pypdf in a child process with a deadline, a page cap and a character cap.

pypdf's cost has no bound of its own: a 314 KB PDF of 2,000 pages sharing one content stream took over a minute
(each page extracts the whole stream again), and its errors are many kinds (``LimitReachedError`` on a
decompression bomb, ``PdfStreamError`` on a cut file, and plain ``KeyError``s, ``TypeError``s on garbled ones).
So the reading is bounded three ways: at most PDF_MAX_PAGES pages and PDF_MAX_CHARS characters (counted in the
child, which stops there and says what it left out), and PDF_SECONDS of wall clock (the parent kills the child,
and keeps the pages it had sent). A Python thread can't be stopped inside a pypdf call; a child can, at once,
which is also what Cancel does. Any exception in the child comes back as text, never as pypdf's own type.

Protocol: the PDF's bytes on the child's stdin; on its stdout one JSON object a line: ``{"pages": n}`` first,
then ``{"text": …}`` a page, then ``{"cut": why}`` where a cap stopped it; ``{"locked": true}`` for a PDF with a
password, or ``{"error": why}`` at any point.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from app.core.priority import lower_this_thread

# A book runs to a few hundred pages; past this the rest is left out, and the model and the user are told so.
PDF_MAX_PAGES = 1000
# About 250,000 tokens, some 400 pages of a dense book: more than a local model's context holds (the send is refused
# by context_fit past that anyway), so the cap costs nothing that could have been sent. The pages up to it are kept.
PDF_MAX_CHARS = 1_000_000
# The wall clock a PDF may take. The tests' 500-page text PDF reads to the character cap in under a second here;
# real ones, with their fonts, take longer, and on a slow or loaded machine the pages read by then are kept. The
# window never waits on it: it runs off the GUI thread, behind a Cancel.
PDF_SECONDS = 20.0
MEMORY_BYTES = 2 << 30  # the child's address space: a stream pypdf inflates to its 75 MB limit still fits
_ROOT = Path(__file__).resolve().parents[3]  # the folder holding the ``app`` package


class PdfUnread(Exception):
    """The PDF gave no text: ``problem`` says why, and ``fix`` what to do, for the banner."""

    def __init__(self, problem: str, fix: str = "Open and save it again, or attach its text.") -> None:
        super().__init__(problem)
        self.problem, self.fix = problem, fix


class Cancelled(Exception):
    """The reading was cancelled (Cancel, or the window closing)."""


@dataclass(frozen=True)
class PdfText:
    pages: list[str]  # the text of each page read, in order
    page_count: int  # the PDF's pages, read or not
    cut: str = ""  # what was left out and why; empty when the whole PDF was read


@dataclass
class Cancellation:
    """Set from any thread; ends the child reading now, if there is one."""

    cancelled: bool = False
    _process: subprocess.Popen[bytes] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            if self._process is not None:
                _kill(self._process)

    @property
    def pid(self) -> int | None:
        """The reading child's, once it started."""
        return self._process.pid if self._process is not None else None

    def _hold(self, process: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._process = process
            if self.cancelled:
                _kill(process)

    def _release(self, process: subprocess.Popen[bytes]) -> None:
        """The child ended (killed if it had not) and reaped; nothing here signals its pid again."""
        with self._lock:
            _kill(process)
            process.wait()
            self._process = None
        assert process.stdout is not None
        process.stdout.close()


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:  # not reaped: its pid is still its own
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # its group: pypdf starts nothing, but nothing may outlive it


def pdf_text(data: bytes, cancellation: Cancellation | None = None) -> PdfText:
    """The text of the PDF in ``data``, within the caps and the deadline; PdfUnread or Cancelled if none."""
    cancellation = cancellation or Cancellation()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    process = subprocess.Popen(
        [sys.executable, "-m", "app.core.chat.pdf_text", str(PDF_MAX_PAGES), str(PDF_MAX_CHARS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    cancellation._hold(process)
    deadline = time.monotonic() + PDF_SECONDS
    threading.Thread(target=_feed, args=(process, data), daemon=True, name="nalar-pdf-feed").start()
    try:
        output, on_time = _output(process, deadline)
    finally:
        cancellation._release(process)
    if cancellation.cancelled:
        raise Cancelled
    return _parsed(output, on_time, process.returncode)


def _feed(process: subprocess.Popen[bytes], data: bytes) -> None:
    assert process.stdin is not None
    try:
        process.stdin.write(data)
    except OSError:  # the child was killed: the reader says why
        pass
    finally:
        with contextlib.suppress(OSError):
            process.stdin.close()


def _output(process: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, bool]:
    """What the child wrote until it ended (True) or the deadline passed (False)."""
    assert process.stdout is not None
    descriptor, size = process.stdout.fileno(), 0
    chunks: list[bytes] = []
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([descriptor], [], [], left)[0]:
            continue
        chunk = os.read(descriptor, 1 << 16)
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
        if size > 8 * PDF_MAX_CHARS + (1 << 20):  # UTF-8 and JSON at their widest, and then some: not our child
            break
    return b"".join(chunks), False


def _parsed(output: bytes, on_time: bool, returncode: int | None) -> PdfText:
    pages: list[str] = []
    page_count, cut = -1, ""  # -1: the child never said how many pages there are
    for line in output.split(b"\n"):
        try:
            record = json.loads(line)
        except ValueError:  # the line the deadline cut, or the end
            continue
        if "locked" in record:
            raise PdfUnread("this PDF is password-protected", "Save an unprotected copy and attach that.")
        if "error" in record:
            raise PdfUnread(f"this PDF can't be read ({record['error']})")
        page_count = record.get("pages", page_count)
        cut = record.get("cut", cut)
        if "text" in record:
            pages.append(record["text"])
    if not on_time:
        if not pages:
            raise PdfUnread(f"reading it took more than {PDF_SECONDS:g} s")
        cut = f"reading stopped after {PDF_SECONDS:g} s, at page {len(pages):,} of {max(page_count, 0):,}"
    elif page_count < 0 or (not cut and len(pages) < page_count):
        raise PdfUnread(f"this PDF can't be read (its reader ended at page {len(pages) + 1}, exit code {returncode})")
    return PdfText(pages, page_count, cut)


def extracted(data: bytes, max_pages: int, max_chars: int) -> Iterator[dict[str, object]]:
    """The child's records for the PDF in ``data``: its page count, then a page's text at a time, until a cap."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted and not reader.decrypt(""):
        yield {"locked": True}
        return
    count = len(reader.pages)
    yield {"pages": count}
    chars = 0
    for number in range(count):
        if number == max_pages:
            yield {"cut": f"only its first {max_pages:,} of {count:,} pages were read"}
            return
        # A lone surrogate (a font's broken map) can't be written as UTF-8: replaced, as a viewer would show it.
        text = (reader.pages[number].extract_text() or "").encode("utf-8", "replace").decode("utf-8")
        if chars + len(text) > max_chars:
            yield {"text": text[:max_chars - chars]}
            yield {"cut": f"only its first {max_chars:,} characters were read, to page {number + 1:,} of {count:,}"}
            return
        chars += len(text)
        yield {"text": text}


def main() -> None:
    """The child: the PDF from stdin, records to stdout; any exception is a record too."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C in the terminal is the window's to handle
    lower_this_thread()
    with contextlib.suppress(ImportError, ValueError, OSError):  # elsewhere, or refused: the deadline still holds
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    records = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # anything pypdf prints goes to stderr, not into the records
    max_pages, max_chars = int(sys.argv[1]), int(sys.argv[2])
    try:
        for record in extracted(sys.stdin.buffer.read(), max_pages, max_chars):
            records.write(json.dumps(record, ensure_ascii=False) + "\n")
            records.flush()
    except MemoryError:
        records.write(json.dumps({"error": f"it needs more than the {MEMORY_BYTES >> 30} GiB a PDF is given"}) + "\n")
    except Exception as exc:  # noqa: BLE001 - pypdf raises many kinds; each becomes the banner's text
        records.write(json.dumps({"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}) + "\n")
    records.flush()


if __name__ == "__main__":
    main()
