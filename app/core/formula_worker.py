"""Formulas drawn as SVG by ziamath in a child process, so its pure-Python layout never holds the window's GIL.

A thread of the window's own process drew them before: while it ran (tens of seconds after a formula-dense reply)
each of the GUI thread's PySide calls waited for the GIL behind it, and the window stalled for seconds
(docs/BENCHMARKS.md, "The window while formulas stream"). The child reads requests on its stdin and ends when that
pipe closes, so it goes with the window whatever ends it, kill -9 included.

Protocol, one request a line on the child's stdin: ``key<TAB>display<TAB>pixels<TAB>source``, the source as a JSON
string. One answer per request on its stdout:
``key<TAB>length\\n`` and ``length`` bytes of SVG, or ``key<TAB>-1<TAB>reason\\n`` where ziamath can't draw it.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from app.core.priority import lower_this_thread

log = logging.getLogger(__name__)
MATH_PIXELS = 17  # the formula's font size, near the pane's text
_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the ``app`` package


def formula_svg(source: str, display: bool, pixels: int = MATH_PIXELS) -> tuple[bytes | None, str]:
    """The formula as SVG, or None and the reason where ziamath can't parse it."""
    import ziamath  # a second's import: only in the child, once the first formula shows up

    ziamath.config.svg2 = False  # QtSvg draws SVG Tiny: plain paths, not <symbol> and <use href>
    try:
        return ziamath.Latex(source, size=pixels + (3 if display else 0)).svg().encode(), ""
    except Exception as exc:  # noqa: BLE001 - ziamath raises many kinds on input it doesn't cover
        return None, f"{type(exc).__name__}: {exc}"


# Called on the worker's reader thread: (key, SVG or None, the reason where None).
Delivery = Callable[[str, "bytes | None", str], None]


class FormulaWorker:
    """The parent's side: ``draw`` sends a request, ``deliver`` gets each answer on a reader thread.

    The child starts at the first request. If it dies, the formulas it owed are delivered as None (shown as
    their source) and the next request starts a new one.
    """

    def __init__(self, deliver: Delivery) -> None:
        self.deliver = deliver
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        # Requests go through a writer thread: a full pipe (thousands queued) must block it, not the window.
        self._requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._owed: dict[subprocess.Popen[bytes], list[str]] = {}  # each child's requests not answered yet

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def draw(self, key: str, source: str, display: bool, pixels: int = MATH_PIXELS) -> None:
        with self._lock:
            self._owed[self._started()].append(key)
            self._requests.put(f"{key}\t{int(display)}\t{pixels}\t{json.dumps(source)}\n".encode())

    def close(self) -> None:
        """Ends the child: its stdin closes, and it exits after the formula it is drawing."""
        with self._lock:
            self._process = None
            self._requests.put(None)

    def _started(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.returncode is not None:  # set by its reader, at its end
            if self._process is not None:
                self._requests.put(None)  # the old writer ends
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
            process = subprocess.Popen([sys.executable, "-m", "app.core.formula_worker"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
            self._process, self._owed[process], self._requests = process, [], queue.SimpleQueue()
            threading.Thread(target=self._write, args=(process, self._requests), daemon=True,
                             name="nalar-maths-writer").start()
            threading.Thread(target=self._read, args=(process,), daemon=True, name="nalar-maths-reader").start()
        return self._process

    @staticmethod
    def _write(process: subprocess.Popen[bytes], requests: queue.SimpleQueue[bytes | None]) -> None:
        assert process.stdin is not None
        try:
            while (line := requests.get()) is not None:
                process.stdin.write(line)
                process.stdin.flush()
            process.stdin.close()
        except OSError as exc:  # the child died: its reader delivers what it owed
            log.warning("the formula drawer ended (%s); formulas show as their source", exc)

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        while header := process.stdout.readline():
            key, length, *reason = header.decode().rstrip("\n").split("\t", 2)
            svg = process.stdout.read(int(length)) if int(length) >= 0 else None
            with self._lock:
                self._owed[process].remove(key)
            self.deliver(key, svg, reason[0] if reason else "")
        process.wait()
        with self._lock:
            owed = self._owed.pop(process)
        for key in owed:  # drawn by nobody now: shown as their source
            self.deliver(key, None, f"the formula drawer ended (exit code {process.returncode})")


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


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C in the terminal is the window's to handle
    lower_this_thread()  # the drawing takes the CPU the window's GUI thread leaves
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything a library prints goes to stderr, not into the answers
    serve(sys.stdin.buffer, answers)
