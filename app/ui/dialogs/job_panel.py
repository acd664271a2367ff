"""Long jobs as child processes: `python -m app <command> --progress-jsonl` in its own session.

JobProcess reads the job's lines on two reader threads and hands them to the GUI thread as queued Qt
signals: a stream of lines, which the runner's one-result operations don't model. The wait for the job's end
is an operation of the one runner (app.ui.controllers.operations). Cancelling sends SIGTERM to the whole
process group, then SIGKILL after a grace period, so a job and the engine processes it started end together.
JobPanel is Run, Cancel and progress.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil
from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from qasync import asyncSlot

from app.core.measure.job_lines import JobLine, parse_job_line
from app.ui.controllers.operations import Operation, run_blocking

STDERR_TAIL_LINES = 40
CANCEL_GRACE_S = 15.0  # the bench closes its engine on SIGTERM; vLLM's own shutdown waits up to 5 s


def group_members(pgid: int) -> list[psutil.Process]:
    """Live processes of a process group (zombies have ended: PID 1 may never reap them here)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def app_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "app", *args]


def report_table(headers: list[str]) -> QTableWidget:
    """A read-only table for a job's report rows (the row builders are in app/core, shared with the terminal)."""
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.verticalHeader().hide()
    table.horizontalHeader().setStretchLastSection(True)
    return table


def fill_table(table: QTableWidget, rows: list[list[str]]) -> None:
    table.setRowCount(len(rows))
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            table.setItem(r, c, QTableWidgetItem(value))
    table.resizeColumnsToContents()


class JobProcess(QObject):
    """One job child process in its own session. ``line`` and ``finished`` arrive on the GUI thread."""

    line = Signal(object)          # JobLine
    finished = Signal(int, str)    # exit code, stderr tail

    def __init__(self, argv: list[str], parent: QObject | None = None, grace_s: float = CANCEL_GRACE_S) -> None:
        super().__init__(parent)
        self.argv = argv
        self.grace_s = grace_s
        self.proc: subprocess.Popen[str] | None = None
        self.cancelled = False
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._threads: list[threading.Thread] = []
        self._waiter: Operation[tuple[int, str]] | None = None
        self._quiet = False  # set when the owner goes away: no more signals
        self._kill_timer = QTimer(self)
        self._kill_timer.setSingleShot(True)
        self._kill_timer.timeout.connect(self.kill_group)

    def start(self) -> None:
        package_root = str(Path(__file__).resolve().parents[3])  # `-m app` works from a source checkout too
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH"))
                                                          if p), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True, encoding="utf-8", errors="replace",
                                     bufsize=1, env=env, start_new_session=True)
        readers = [threading.Thread(target=self._read_stdout, name="job-stdout", daemon=True),
                   threading.Thread(target=self._read_stderr, name="job-stderr", daemon=True)]
        for thread in readers:
            thread.start()
        self._threads = readers
        self._waiter = run_blocking("Running the job", lambda: self._wait(readers), parent=self).success(
            self._on_ended)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pgid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None  # start_new_session: the group is the child's pid

    # ---- worker threads (no widgets here: they only emit) --------------------------------------

    def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            parsed = parse_job_line(raw)
            if parsed is not None and not self._quiet:
                self.line.emit(parsed)

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            self._stderr_tail.append(raw.rstrip("\n"))

    def _wait(self, readers: list[threading.Thread]) -> tuple[int, str]:
        """The job's exit code and stderr tail, once it and what it started have ended."""
        assert self.proc is not None
        code = self.proc.wait()
        self._end_leftovers()
        for thread in readers:
            thread.join(5)  # a pipe held by a leftover grandchild must not hang us
        return code, "\n".join(self._stderr_tail)

    def _on_ended(self, ended: tuple[int, str]) -> None:
        if not self._quiet:
            self.finished.emit(*ended)

    # ---- cancelling --------------------------------------------------------------------------

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.pgid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, sig)

    def cancel(self) -> None:
        """SIGTERM to the group now, SIGKILL after the grace period (without blocking the UI)."""
        if self.proc is None:
            return
        self.cancelled = True
        self._signal_group(signal.SIGTERM)
        self._kill_timer.start(int(self.grace_s * 1000))

    def kill_group(self) -> None:
        self._signal_group(signal.SIGKILL)

    def _end_leftovers(self, timeout_s: float = 10.0) -> None:
        """Once the job has exited, nothing it started may outlive it: an EngineCore still shutting down
        after a cancel (or a crash) gets SIGKILL, and the job counts as ended once those are gone."""
        pgid = self.pgid
        if pgid is None or not group_members(pgid):
            return
        self.kill_group()
        deadline = time.monotonic() + timeout_s
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)  # a worker thread; killed processes give no signal we could wait on

    def terminate_and_wait(self) -> None:
        """Blocking, for closing: SIGTERM, wait the grace period, SIGKILL what is left; no more signals."""
        self._quiet = True
        self._kill_timer.stop()
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.cancelled = True
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(self.grace_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill_group()  # grandchildren (an EngineCore) may outlive the job itself
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        for thread in self._threads:
            thread.join(5)
        if self._waiter is not None:
            self._waiter.wait(15)


class JobPanel(QWidget):
    """Run and Cancel, a progress bar with the current step, and the error of a failed run."""

    result_ready = Signal(dict)
    running_changed = Signal(bool)

    def __init__(self, intro: str, command: Callable[[], list[str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.command = command
        self.before_run: Callable[[], Awaitable[bool]] | None = None  # False: don't start
        self.after_run: Callable[[], None] | None = None
        self.grace_s = CANCEL_GRACE_S
        self.job: JobProcess | None = None
        self._shut = False  # the dialog is closing: start nothing more
        self.last_result: dict[str, Any] | None = None
        self.intro = QLabel(intro)
        self.intro.setWordWrap(True)
        self.run_button = QPushButton("Run")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setValue(0)
        self.step_label = QLabel("")
        self.error_label = QLabel("")
        self.error_label.setWordWrap(True)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_label.setStyleSheet("color: #b00020;")
        self.error_label.hide()
        controls = QHBoxLayout()
        controls.addWidget(self.run_button)
        controls.addWidget(self.cancel_button)
        controls.addWidget(self.progress, 1)
        self.body = QVBoxLayout()  # the tab puts its result view here
        layout = QVBoxLayout(self)
        layout.addWidget(self.intro)
        layout.addLayout(controls)
        layout.addWidget(self.step_label)
        layout.addWidget(self.error_label)
        layout.addLayout(self.body, 1)
        self.run_button.clicked.connect(self.run)
        self.cancel_button.clicked.connect(self.cancel)

    @property
    def running(self) -> bool:
        return self.job is not None

    @asyncSlot()
    async def run(self) -> None:
        if self.job is not None:
            return
        self.run_button.setEnabled(False)
        self.error_label.hide()
        self.progress.setValue(0)
        if self.before_run is not None and not await self.before_run():
            self.run_button.setEnabled(True)
            return
        if self._shut:  # closed while the chat engine was stopping
            self._ended()
            return
        self.job = JobProcess(self.command(), self, grace_s=self.grace_s)
        self.job.line.connect(self.on_line)
        self.job.finished.connect(self.on_finished)
        self.cancel_button.setEnabled(True)
        self.step_label.setText("starting…")
        self.running_changed.emit(True)
        try:
            self.job.start()
        except OSError as exc:
            self.job = None
            self.show_error(f"The job could not start: {exc}", "")
            self._ended()

    def cancel(self) -> None:
        if self.job is not None:
            self.step_label.setText("cancelling…")
            self.cancel_button.setEnabled(False)
            self.job.cancel()

    def on_line(self, line: JobLine) -> None:
        if line.event == "progress":
            if line.fraction is None:
                self.progress.setRange(0, 0)
            else:
                self.progress.setRange(0, 100)
                self.progress.setValue(round(line.fraction * 100))
            self.step_label.setText(line.message)
        elif line.event == "error" and self.job is not None and not self.job.cancelled:
            self.show_error(line.message, line.fix)
        elif line.event == "result" and line.data is not None:
            self.last_result = line.data
            self.result_ready.emit(line.data)

    def on_finished(self, code: int, stderr_tail: str) -> None:
        job, self.job = self.job, None
        if job is None:
            return
        if job.cancelled:
            self.step_label.setText("cancelled")
        elif code != 0:
            if self.error_label.isHidden():  # no error line: the stderr tail is all we have
                tail = "\n".join(stderr_tail.splitlines()[-8:]) or "(no output)"
                self.show_error(f"The job exited with code {code}.", f"Its last output:\n{tail}")
            self.step_label.setText("failed")
        else:
            self.progress.setRange(0, 100)
            self.progress.setValue(100)
            self.step_label.setText("done")
        job.deleteLater()
        self._ended()

    def show_error(self, message: str, fix: str) -> None:
        self.error_label.setText(message + (f"\nFix: {fix}" if fix else ""))
        self.error_label.show()

    def _ended(self) -> None:
        self.run_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        self.progress.setRange(0, 100)
        self.running_changed.emit(False)
        if self.after_run is not None:
            self.after_run()

    def shut(self) -> None:
        """Closing: end the job and everything it started, now."""
        self._shut = True
        job, self.job = self.job, None
        if job is not None:
            job.terminate_and_wait()
            self.step_label.setText("cancelled")
            self._ended()
