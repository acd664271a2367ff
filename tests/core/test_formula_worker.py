"""The formula drawer's child process (app/core/formula_worker.py), real: a Python child running ziamath."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from app.core.formula_worker import FormulaWorker

ROOT = Path(__file__).resolve().parents[2]


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # PID 1 here does not reap
    except psutil.NoSuchProcess:
        return True


def until(condition, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class Answers:
    def __init__(self) -> None:
        self.got: list[tuple[str, bytes | None, str]] = []
        self.lock = threading.Lock()

    def __call__(self, key: str, svg: bytes | None, reason: str) -> None:
        with self.lock:
            self.got.append((key, svg, reason))

    def keys(self) -> list[str]:
        with self.lock:
            return [key for key, _, _ in self.got]


def test_each_request_gets_its_svg_or_ziamaths_reason_in_order() -> None:
    """Bugs caught: an answer matched to the wrong formula (a formula drawn as another's image), a formula
    ziamath refuses never answered (shown as "drawing" for ever), and a source with a tab or a line break
    breaking the line protocol."""
    answers = Answers()
    worker = FormulaWorker(answers)
    try:
        worker.draw("a", "\\frac{1}{2}", False)
        worker.draw("b", "\\frac{1}{", True)
        worker.draw("c", "x\t+\n y^2", True)
        assert until(lambda: len(answers.keys()) == 3)
        (a, svg_a, _), (b, svg_b, reason_b), (c, svg_c, _) = answers.got
        assert (a, b, c) == ("a", "b", "c")
        assert svg_a is not None and svg_a.startswith(b"<svg") and svg_c is not None and svg_c.startswith(b"<svg")
        assert svg_b is None and reason_b, "ziamath's reason comes back"
        assert worker.pid != os.getpid()
    finally:
        worker.close()


def test_the_drawer_ends_with_the_window_even_when_it_is_killed() -> None:
    """Bug caught: a drawing process left running after the window died (kill -9: no atexit, no close)."""
    script = ("import sys, time\nfrom app.core.formula_worker import FormulaWorker\n"
              "w = FormulaWorker(lambda *a: None)\nw.draw('k', 'x^2', False)\n"
              "print(w.pid, flush=True)\ntime.sleep(120)\n")
    window = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert window.stdout is not None
        drawer = int(window.stdout.readline())
        assert not gone(drawer)
        window.send_signal(signal.SIGKILL)
        window.wait(10)
        assert until(lambda: gone(drawer), 30), "the drawer saw its stdin close and ended"
    finally:
        window.kill()
        window.wait(10)


def test_a_drawer_that_dies_answers_none_for_what_it_owed_and_the_next_request_starts_another() -> None:
    """Bugs caught: formulas owed by a crashed drawer waiting for ever (the pane's "drawing" never ends), and a
    dead drawer never replaced (no formula drawn again until a restart)."""
    answers = Answers()
    worker = FormulaWorker(answers)
    try:
        worker.draw("first", "x^2", False)
        assert until(lambda: answers.keys() == ["first"])
        dead = worker.pid
        assert dead is not None
        os.kill(dead, signal.SIGSTOP)  # held, so the next request is surely owed when it dies
        worker.draw("owed", "y^2", False)
        os.kill(dead, signal.SIGKILL)
        assert until(lambda: answers.keys() == ["first", "owed"])
        assert answers.got[1][1] is None and "ended" in answers.got[1][2]
        worker.draw("after", "z^2", False)
        assert until(lambda: answers.keys() == ["first", "owed", "after"])
        assert worker.pid != dead and answers.got[2][1] is not None
    finally:
        worker.close()
