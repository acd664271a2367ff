"""Formulas drawn as SVG by ziamath in a child process, so its pure-Python layout never holds the window's GIL.

A thread of the window's own process drew them before: while it ran (tens of seconds after a formula-dense reply)
each of the GUI thread's PySide calls waited for the GIL behind it, and the window stalled for seconds
(docs/BENCHMARKS.md, "The window while formulas stream"). The child reads requests on its stdin and ends when that
pipe closes, so it goes with the window whatever ends it, kill -9 included.

ziamath's cost grows faster than a formula's length (2 KB took 3.5 s, 4 KB 15 s, 20 KB over 300 s), and the child
draws one formula at a time, so one hostile formula held back every formula after it. Each formula is therefore
bounded twice: by its length (MAX_FORMULA_CHARS, checked before anything is sent) and by its time in the child
(FORMULA_SECONDS, after which the child and its process group are killed, that formula shown as its source, and
a new child draws the rest).

Protocol: the child writes ``ready`` on its stdout once ziamath is imported. Then one request a line on its
stdin: ``key<TAB>display<TAB>pixels<TAB>source``, the source as a JSON string. One answer per request on its
stdout: ``key<TAB>length\\n`` and ``length`` bytes of SVG, or ``key<TAB>-1<TAB>reason\\n`` where ziamath can't
draw it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from app.core.priority import lower_this_thread

log = logging.getLogger(__name__)
MATH_PIXELS = 17  # the formula's font size, near the pane's text
# The longest formula sent to the child. SymPy's LaTeX corpus (`nalar bench maths`) has none over 390 characters
# (99 % under 150); 1,500 characters of matrix or sum take 0.6-1 s of ziamath here, inside the deadline with room
# for a loaded machine. Longer ones are shown as their source at once: a formula that long is rarely read as an
# image, and at 2 KB and over ziamath's cost climbs to seconds and minutes.
MAX_FORMULA_CHARS = 1500
# The most one formula may hold the child (wall clock from when the child is free for it): 5x what a formula at
# the cap takes here, so only a pathological one reaches it; the formulas behind it wait at most this long.
FORMULA_SECONDS = 5.0
READY = b"ready\n"
_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the ``app`` package
CHILD = ("-m", "app.core.formula_worker")


def formula_svg(source: str, display: bool, pixels: int = MATH_PIXELS) -> tuple[bytes | None, str]:
    """The formula as SVG, or None and the reason where ziamath can't parse it."""
    import ziamath  # a second's import: only in the child, once the first formula shows up

    ziamath.config.svg2 = False  # QtSvg draws SVG Tiny: plain paths, not <symbol> and <use href>
    try:
        return ziamath.Latex(source, size=pixels + (3 if display else 0)).svg().encode(), ""
    except Exception as exc:  # noqa: BLE001 - ziamath raises many kinds on input it doesn't cover
        return None, f"{type(exc).__name__}: {exc}"


# Called on the worker's reader thread (or, for a formula over the cap, on the caller's): key, SVG or None, why None.
Delivery = Callable[[str, "bytes | None", str], None]


class _Child:
    """One drawing process in a process group of its own: the requests it owes, in order, and since when the
    first of them has had it."""

    def __init__(self, command: Sequence[str]) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
        # A session of its own: killing its group never reaches the window's, and takes whatever it started.
        self.process = subprocess.Popen([sys.executable, *command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        # Requests go through a writer thread: a full pipe (thousands queued) must block it, not the window.
        self.requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.owed: list[tuple[str, bytes]] = []  # (key, request line), the first one being drawn
        self.ready = False  # ziamath imported: the first owed formula's time runs
        self.since = 0.0  # when the first owed formula took the child (time.monotonic)
        self.overran: str | None = None  # the key it was killed for, past its deadline
        self.ended = False  # its reader saw the end of its output

    def kill(self) -> None:
        """The child and anything in its group, at once (SIGKILL: it holds nothing to save)."""
        if self.process.poll() is None:  # not reaped: its pid is still its own
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)


class FormulaWorker:
    """The parent's side: ``draw`` sends a request, ``deliver`` gets each answer on a reader thread.

    The child starts at the first request. Past its deadline a formula is delivered as None (shown as its source),
    the child is killed and a new one draws the rest. If the child dies otherwise, the formulas it owed are
    delivered as None and the next request starts a new one.
    """

    def __init__(self, deliver: Delivery, *, command: Sequence[str] = CHILD, deadline: float = FORMULA_SECONDS,
                 max_chars: int = MAX_FORMULA_CHARS) -> None:
        self.deliver = deliver
        self.command, self.deadline, self.max_chars = tuple(command), deadline, max_chars
        self._changed = threading.Condition()  # guards the children's state; wakes the deadline watches
        self._child: _Child | None = None

    @property
    def pid(self) -> int | None:
        return self._child.process.pid if self._child is not None else None

    def draw(self, key: str, source: str, display: bool, pixels: int = MATH_PIXELS) -> None:
        if len(source) > self.max_chars:  # never sent: its drawing could hold the child for minutes
            self.deliver(key, None, f"{len(source):,} characters, over the {self.max_chars:,} drawn")
            return
        with self._changed:
            self._send(self._started(), [(key, f"{key}\t{int(display)}\t{pixels}\t{json.dumps(source)}\n".encode())])

    def close(self) -> None:
        """Ends the child and its process group now, whatever it is drawing; what it owed is delivered as None."""
        with self._changed:
            child, self._child = self._child, None
        if child is not None:
            child.requests.put(None)
            child.kill()

    def _started(self) -> _Child:
        if self._child is None or self._child.ended:
            child = self._child = _Child(self.command)
            for work, name in ((self._write, "writer"), (self._read, "reader"), (self._watch, "deadline")):
                threading.Thread(target=work, args=(child,), daemon=True, name=f"nalar-maths-{name}").start()
        return self._child

    def _send(self, child: _Child, requests: list[tuple[str, bytes]]) -> None:
        """Under the lock: ``requests`` owed by ``child`` and queued to its writer."""
        if not child.owed:
            child.since = time.monotonic()
        child.owed.extend(requests)
        for _, line in requests:
            child.requests.put(line)
        self._changed.notify_all()

    @staticmethod
    def _write(child: _Child) -> None:
        stdin = child.process.stdin
        assert stdin is not None
        try:
            while (line := child.requests.get()) is not None:
                stdin.write(line)
                stdin.flush()
            stdin.close()
        except OSError as exc:  # the child died: its reader delivers what it owed
            log.warning("the formula drawer ended (%s); formulas show as their source", exc)

    def _watch(self, child: _Child) -> None:
        """Kills ``child`` once the formula it draws has had it for ``deadline`` seconds."""
        with self._changed:
            while not child.ended:
                left = child.since + self.deadline - time.monotonic()
                if child.ready and child.owed and left <= 0:
                    child.overran = child.owed[0][0]
                    child.kill()
                    return
                self._changed.wait(left if child.ready and child.owed else None)

    def _read(self, child: _Child) -> None:
        stdout = child.process.stdout
        assert stdout is not None
        if stdout.readline() == READY:
            with self._changed:
                child.ready, child.since = True, time.monotonic()
                self._changed.notify_all()
            while header := stdout.readline():
                key, length, *reason = header.decode().rstrip("\n").split("\t", 2)
                svg = stdout.read(int(length)) if int(length) >= 0 else None
                with self._changed:
                    owed_keys = [owed for owed, _ in child.owed]
                    if key in owed_keys:  # the first, as the child answers in order
                        del child.owed[owed_keys.index(key)]
                    child.since = time.monotonic()
                    self._changed.notify_all()
                self.deliver(key, svg, reason[0] if reason else "")
        child.process.wait()
        stdout.close()
        with self._changed:
            child.ended = True
            self._changed.notify_all()
            owed, child.owed = child.owed, []
            if child.overran is not None and owed and self._child is child:  # not closed: a new child draws the rest
                self._send(self._started(), owed[1:])
                given_up, owed = owed[:1], []
            else:
                given_up = []
        child.requests.put(None)  # its writer ends
        for key, _ in given_up:
            self.deliver(key, None, f"its drawing took over {self.deadline:g} s")
        for key, _ in owed:  # drawn by nobody now: shown as their source
            self.deliver(key, None, f"the formula drawer ended (exit code {child.process.returncode})")


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """The child's loop: a request a line until the parent closes the pipe."""
    for line in requests:
        key, display, pixels, source = line.decode().rstrip("\n").split("\t", 3)
        svg, reason = formula_svg(json.loads(source), display == "1", int(pixels))
        if svg is None:
            answers.write(f"{key}\t-1\t{' '.join(reason.split())[:200]}\n".encode())
        else:
            answers.write(f"{key}\t{len(svg)}\n".encode() + svg)
        answers.flush()


def main() -> None:
    """The child: ziamath imported, ``ready`` said, then ``serve`` until stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C in the terminal is the window's to handle
    lower_this_thread()  # the drawing takes the CPU the window's GUI thread leaves
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything a library prints goes to stderr, not into the answers
    with contextlib.suppress(Exception):  # a broken ziamath is reported formula by formula, by formula_svg
        import ziamath  # noqa: F401 - imported before ``ready``: the import is not charged to the first formula
    answers.write(READY)
    answers.flush()
    serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    main()
