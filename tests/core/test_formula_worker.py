"""The formula drawer's child process (app/core/formula_worker.py), real: a Python child running ziamath."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

from app.core.formula_worker import FormulaWorker

ROOT = Path(__file__).resolve().parents[2]


def ended(pid: int, timeout: float) -> bool:
    """Whether ``pid`` ends within ``timeout``: its pidfd turns readable when it exits (a zombie counts, since
    PID 1 here does not reap)."""
    descriptor = os.pidfd_open(pid)
    try:
        return bool(select.select([descriptor], [], [], timeout)[0])
    finally:
        os.close(descriptor)


class Answers:
    """The worker's deliveries, waited on as they arrive."""

    def __init__(self) -> None:
        self.got: list[tuple[str, bytes | None, str]] = []
        self.arrived = threading.Condition()

    def __call__(self, key: str, svg: bytes | None, reason: str) -> None:
        with self.arrived:
            self.got.append((key, svg, reason))
            self.arrived.notify_all()

    def keys(self) -> list[str]:
        with self.arrived:
            return [key for key, _, _ in self.got]

    def until(self, keys: list[str], timeout: float = 60.0) -> bool:
        with self.arrived:
            return self.arrived.wait_for(lambda: [key for key, _, _ in self.got] == keys, timeout)


def test_each_request_gets_its_svg_or_ziamaths_reason_in_order() -> None:
    """Bugs caught: an answer matched to the wrong formula (a formula drawn as another's image), a formula
    ziamath refuses never answered (shown as "drawing" for ever), and a source with a tab or a line break
    breaking the line protocol; the drawer competing with the window's GUI thread at its priority."""
    answers = Answers()
    worker = FormulaWorker(answers)
    try:
        worker.draw("a", "\\frac{1}{2}", False)
        worker.draw("b", "\\frac{1}{", True)
        worker.draw("c", "x\t+\n y^2", True)
        assert answers.until(["a", "b", "c"])
        (a, svg_a, _), (b, svg_b, reason_b), (c, svg_c, _) = answers.got
        assert (a, b, c) == ("a", "b", "c")
        assert svg_a is not None and svg_a.startswith(b"<svg") and svg_c is not None and svg_c.startswith(b"<svg")
        assert svg_b is None and reason_b, "ziamath's reason comes back"
        assert worker.pid != os.getpid()
        if sys.platform.startswith("linux"):  # elsewhere the priority is left as it is (app/core/priority.py)
            assert os.getpriority(os.PRIO_PROCESS, worker.pid) > os.getpriority(os.PRIO_PROCESS, 0), \
                "the drawer runs below the window's priority"
    finally:
        worker.close()


def test_the_drawer_ends_with_the_window_even_when_it_is_killed() -> None:
    """Bug caught: a drawing process left running after the window died (kill -9: no atexit, no close)."""
    script = ("import sys, time\nfrom app.core.formula_worker import FormulaWorker\n"
              "w = FormulaWorker(lambda *a: None)\nw.draw('k', 'x^2', False)\n"
              "print(w.pid, flush=True)\nsys.stdin.read()\n")  # until it is killed
    window = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert window.stdout is not None
        drawer = int(window.stdout.readline())
        assert not ended(drawer, 0)
        window.send_signal(signal.SIGKILL)
        window.wait(10)
        assert ended(drawer, 30), "the drawer saw its stdin close and ended"
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
        assert answers.until(["first"])
        dead = worker.pid
        assert dead is not None
        os.kill(dead, signal.SIGSTOP)  # held, so the next request is surely owed when it dies
        worker.draw("owed", "y^2", False)
        os.kill(dead, signal.SIGKILL)
        assert answers.until(["first", "owed"])
        assert answers.got[1][1] is None and "ended" in answers.got[1][2]
        worker.draw("after", "z^2", False)
        assert answers.until(["first", "owed", "after"])
        assert worker.pid != dead and answers.got[2][1] is not None
    finally:
        worker.close()
