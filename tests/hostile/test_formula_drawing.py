"""Hostile formulas for the drawer's child process (app/core/formula_worker.py): one too long to draw, one whose
drawing never ends, and a close while the child is busy. The child is the real one (its ``ready``, its loop, its
protocol) with a drawing that logs what reaches it and never ends for one source (tests/support/formula_child.py)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.formula_worker import MAX_FORMULA_CHARS, FormulaWorker
from tests.core.test_formula_worker import Answers
from tests.support.formula_child import HANG
from tests.support.processes import gone

GUARD_S = 60.0  # a hang guard only: each wait below ends on an event long before


def drawer_command(log: Path, fifo: Path | None = None) -> list[str]:
    return ["-m", "tests.support.formula_child", str(log), *([str(fifo)] if fifo else [])]


def sources_drawn(log: Path) -> list[str]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []


@contextlib.contextmanager
def hanging_told(fifo: Path) -> Iterator[list[int]]:
    """Opens ``fifo`` for reading before the child writes to it; yields the list the grandchild's pid goes into
    (``wait_hanging``), and kills every process it heard of on the way out, the test passed or not."""
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    heard: list[int] = [reader]
    try:
        yield heard
    finally:
        os.close(reader)
        for pid in heard[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def wait_hanging(heard: list[int]) -> int:
    """The grandchild's pid, once the child says it is hanging (select on the FIFO, GUARD_S at most)."""
    ready, _, _ = select.select([heard[0]], [], [], GUARD_S)
    assert ready, "the child never reached the hanging formula"
    line = os.read(heard[0], 200).decode()
    assert line.startswith("hanging "), line
    heard.append(int(line.split()[1]))
    return heard[-1]


def kill_quietly(pid: int | None) -> None:
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_10000_character_formula_is_shown_as_source_and_never_reaches_the_drawer(tmp_path: Path) -> None:
    """Bug caught: a 10,000-character formula (``x+x+…``) sent to ziamath, which needs minutes for it, so every
    formula behind it showed as source meanwhile. Over the cap it is answered at once, as its source, and the
    child only ever sees the short one."""
    log = tmp_path / "drawn.jsonl"
    answers = Answers()
    worker = FormulaWorker(answers, command=drawer_command(log))
    try:
        huge = "x+" * 5000
        assert len(huge) > MAX_FORMULA_CHARS
        worker.draw("huge", huge, True)
        worker.draw("small", "x^2", False)
        assert answers.until(["huge", "small"], GUARD_S)
        (_, huge_svg, huge_reason), (_, small_svg, _) = answers.got
        assert huge_svg is None and f"{MAX_FORMULA_CHARS:,}" in huge_reason
        assert small_svg is not None and small_svg.startswith(b"<svg")
        assert sources_drawn(log) == ["x^2"], "the long formula never reached the child"
    finally:
        pid = worker.pid
        worker.close()
        kill_quietly(pid)


def test_a_formula_that_never_finishes_is_given_up_at_its_deadline_and_a_new_drawer_draws_the_rest(
        tmp_path: Path) -> None:
    """Bug caught: a formula whose drawing never ends (``\\hang{forever}``, as ziamath on 20 KB of LaTeX) held the
    child for ever, so the formula queued behind it (``x^2``) was never drawn. Past its deadline the child is
    killed, that formula comes back as its source, and a new child draws ``x^2``."""
    log, fifo = tmp_path / "drawn.jsonl", tmp_path / "told"
    answers = Answers()
    worker = FormulaWorker(answers, command=drawer_command(log, fifo), deadline=2.0)
    stuck: int | None = None
    with hanging_told(fifo) as heard:
        try:
            worker.draw("hangs", HANG, False)
            worker.draw("after", "x^2", False)
            grandchild = wait_hanging(heard)
            stuck = worker.pid
            assert answers.until(["hangs", "after"], GUARD_S)
            (_, hung_svg, hung_reason), (_, after_svg, _) = answers.got
            assert hung_svg is None and "over 2 s" in hung_reason
            assert after_svg is not None and after_svg.startswith(b"<svg"), "a new child drew the next formula"
            assert stuck is not None and worker.pid != stuck and gone(stuck, GUARD_S) and gone(grandchild, GUARD_S)
            assert sources_drawn(log) == [HANG, "x^2"], "each formula drawn once, the hanging one not again"
        finally:
            pid = worker.pid
            worker.close()
            kill_quietly(pid)
            kill_quietly(stuck)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfd is Linux's")
def test_close_while_a_formula_never_finishes_ends_the_drawer_and_its_process_group(tmp_path: Path) -> None:
    """Bug caught: after ``close()`` the child went on drawing (``\\hang{forever}``, a full core on a real long
    formula) with the window gone, since it read stdin again only after the formula; whatever it had started
    lived on too. Now close() kills its process group: the child and its grandchild both end."""
    log, fifo = tmp_path / "drawn.jsonl", tmp_path / "told"
    answers = Answers()
    worker = FormulaWorker(answers, command=drawer_command(log, fifo), deadline=GUARD_S * 10)
    drawer: int | None = None
    with hanging_told(fifo) as heard:
        try:
            worker.draw("hangs", HANG, False)
            grandchild = wait_hanging(heard)
            drawer = worker.pid
            assert drawer is not None and not gone(drawer, 0) and not gone(grandchild, 0)
            assert os.getpgid(drawer) == drawer != os.getpgid(0), "a group of its own, never the window's"
            worker.close()
            assert gone(drawer, GUARD_S), "the drawer ended at close, mid-formula"
            assert gone(grandchild, GUARD_S), "what the drawer started ended with its group"
            assert answers.until(["hangs"], GUARD_S) and answers.got[0][1] is None
        finally:
            worker.close()
            kill_quietly(drawer)
