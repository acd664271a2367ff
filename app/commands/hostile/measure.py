"""One hostile case measured in the window: the longest stall while it is handled (the UI benches' 2 ms timer),
the time until the window shows the result or the message, and the child processes left running after close.

Past the case's deadline, Nalar's own code still holding the GUI thread (the trigger itself, or a slot it led
to) is interrupted by SIGALRM, where the platform has it, so that one frozen input does not end the bench. While
the loop is held past the goal, a thread samples the GUI thread's stack: ``stalled_in`` names the innermost
frames of Nalar's code it was in most often, during the longest stall.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import psutil

from app.commands.hostile.stage import Case, Probe, Stage
from app.commands.window_bench.harness import StallMeter

GOAL_STALL_MS = 100
SETTLE_S = 0.3  # the stall is watched this long after the answer too: what the answer set off still counts
LEFT_GRACE_S = 2.0  # after close, children get this long to end before they count as left running
_ROOT = Path(__file__).resolve().parents[3]  # the checkout: frames are named relative to it
_APP = str(_ROOT / "app")
_COMMANDS = str(_ROOT / "app" / "commands")  # the bench and its command line: not the window's own work
_ENTRY = {str(_ROOT / "app" / name) for name in ("__main__.py", "cli.py")}


@dataclass
class CaseResult:
    name: str
    deadline_s: float
    longest_stall_ms: float | None = None
    answered_s: float | None = None
    answer: Literal["result", "message", "timeout"] = "timeout"
    left_running: list[str] = field(default_factory=list)
    waiting_for: str | None = None  # what a timed-out case waited for, and what the window showed instead
    stalled_in: str | None = None  # where the GUI thread was during the longest stall past the goal
    raised: str | None = None  # an error the trigger raised past the window (no banner, no message)
    interrupted_in: str | None = None  # where the deadline interrupted Nalar's code on the GUI thread

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def app_place(frame: FrameType | None, depth: int = 3) -> str | None:
    """The innermost ``depth`` frames of Nalar's code above the bench's own, innermost first; None where the GUI
    thread is in the bench (its wait, its stall meter) or in Qt and qasync under it. The bench's frames, and the
    command line's below them, are always at the stack's bottom: what runs above them is the window's work."""
    found: list[str] = []
    while frame is not None and len(found) < depth:
        name = frame.f_code.co_filename
        if name.startswith(_COMMANDS) or name in _ENTRY:
            break
        if name.startswith(_APP):
            found.append(f"{Path(name).relative_to(_ROOT)}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    return " ← ".join(found) or None


class Overran(BaseException):
    """The deadline passed with Nalar's code holding the GUI thread (a BaseException: no handler of the app's
    own turns it into a message, which would count as an answer)."""


class GuiDeadline:
    """SIGALRM at the deadline: Nalar's code then on the GUI thread is interrupted; anywhere else (Qt waiting,
    the bench's own wait) the alarm looks again 50 ms later."""

    def __init__(self) -> None:
        self.interrupted_in: str | None = None
        self.looking = False  # the bench is reading the window (``Probe.answered``): not the app's own work

    @contextlib.contextmanager
    def armed(self, seconds: float) -> Iterator[None]:
        if not hasattr(signal, "setitimer"):  # Windows: no interruption, the deadline is checked between events
            yield
            return
        previous = signal.signal(signal.SIGALRM, self._on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        place = None if self.looking else app_place(frame)
        if place is None:
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return
        self.interrupted_in = place
        raise Overran(place)


class StallWitness:
    """Samples the GUI thread's stack every 10 ms while the loop has been held past the goal."""

    def __init__(self, meter: StallMeter, goal_s: float) -> None:
        self.meter, self.goal_s = meter, goal_s
        self._done = threading.Event()
        self._held: dict[float, float] = {}  # stall (by the tick it began after) → longest seen
        # stall → place → seconds the GUI thread was seen there
        self._places: dict[float, dict[str, float]] = collections.defaultdict(lambda: collections.defaultdict(float))
        self._thread = threading.Thread(target=self._watch, daemon=True, name="nalar-bench-stall-witness")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> str | None:
        """Where the GUI thread spent most of the longest stall past the goal."""
        self._done.set()
        self._thread.join(5)
        if not self._held:
            return None
        longest = max(self._held, key=self._held.__getitem__)
        places = self._places[longest]
        return max(places, key=places.__getitem__) if places else "in Qt (no Python frame of Nalar's seen)"

    def _watch(self) -> None:
        """Each sample weighs the time since the one before: a Qt call that keeps the GIL (a long setHtml) lets
        no sample in while it runs, and the first one after it, still in the caller, carries that time."""
        gui = threading.main_thread().ident
        sampled = time.perf_counter()
        while not self._done.wait(0.01):
            now = time.perf_counter()
            began, weight, sampled = self.meter.last_tick, now - sampled, now
            held = now - began
            if held < self.goal_s or gui is None:
                continue
            self._held[began] = held
            place = app_place(sys._current_frames().get(gui))
            if place is not None:
                self._places[began][place] += weight


def measure(case: Case, root: Path) -> CaseResult:
    """``case`` on a window of its own in a folder under ``root``; the window closed and its leftovers ended after."""
    folder = root / case.name
    folder.mkdir()
    stage = Stage(folder)
    result = CaseResult(case.name, case.deadline_s)
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    probe: Probe | None = None
    try:
        probe = case.act(stage)
        timed(stage.loop, probe, result)
    except Exception as exc:  # the set-up failed: reported, and the bench goes on
        result.waiting_for = f"set-up failed: {type(exc).__name__}: {exc}"
    finally:
        with contextlib.suppress(Exception):
            if probe is not None:
                probe.cleanup()
        stage.close()
    result.left_running = left_running(before)
    return result


def timed(loop: Any, probe: Probe, result: CaseResult) -> None:
    meter = StallMeter()
    witness = StallWitness(meter, GOAL_STALL_MS / 1000)
    deadline = GuiDeadline()
    gc.collect()  # the earlier windows' garbage, not this case's
    meter.start()
    witness.start()
    started = time.perf_counter()

    async def handled() -> None:
        with deadline.armed(result.deadline_s):
            try:
                probe.trigger()
            except Overran:
                pass
            except Exception as exc:  # noqa: BLE001 - what the window let through is the finding
                result.raised = f"{type(exc).__name__}: {exc}"[:300]
            while time.perf_counter() - started <= result.deadline_s:
                deadline.looking = True
                answer = probe.answered()
                deadline.looking = False
                if answer is not None:
                    result.answer, result.answered_s = answer, round(time.perf_counter() - started, 3)
                    return
                await asyncio.sleep(0.005)

    try:
        loop.run_until_complete(handled())
    except Overran:  # interrupted between the bench's own steps: the case timed out
        pass
    if result.answer != "timeout":
        loop.run_until_complete(asyncio.sleep(SETTLE_S))
    else:
        shown = probe.shown()
        result.waiting_for = probe.waiting_for + (f"; the window showed: {shown[:200]}" if shown else "")
    result.longest_stall_ms = round(meter.stop() * 1000, 1)
    result.stalled_in = witness.stop()
    result.interrupted_in = deadline.interrupted_in


def left_running(before: set[int]) -> list[str]:
    """Child processes started since ``before`` still alive LEFT_GRACE_S after close: named, then killed, so
    that the next case starts clean."""
    fresh = [child for child in psutil.Process().children(recursive=True) if child.pid not in before]
    _, alive = psutil.wait_procs(fresh, timeout=LEFT_GRACE_S)
    named = []
    for child in alive:
        with contextlib.suppress(psutil.Error, IndexError):
            program, *arguments = child.cmdline()  # the program by its name: where it is installed says nothing
            named.append(f"pid {child.pid}: {' '.join([Path(program).name, *arguments])[:120]}")
        with contextlib.suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(alive, timeout=LEFT_GRACE_S)
    return named
