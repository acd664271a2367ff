"""`nalar bench hostile` on three cheap cases, through its own command line: the JSON's shape, each case answered
(a result or a message, never a timeout) and nothing left running. Timings are the bench's to report, never
asserted here: this machine's speed must not decide a test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.commands.hostile.hostile_bench import run_hostile_bench
from app.core.settings import paths

CHEAP = {"search-nul": "result", "import-open-brackets": "message", "attach-bom-bad-bytes": "message"}
CASE_KEYS = {"name", "deadline_s", "longest_stall_ms", "answered_s", "answer", "left_running", "waiting_for",
             "stalled_in", "raised", "interrupted_in"}


def test_three_cheap_cases_are_answered_and_leave_nothing_running() -> None:
    """Bugs caught: a case that waits for the wrong sign of an answer (a timeout where the window did answer), a
    window or a child process left behind by a case, a report missing a field the docs' table reads, or stdout
    holding more than the JSON."""
    command = [sys.executable, "-m", "app", "bench", "hostile", "--json", "--only", *CHEAP]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert {"benchmark", "machine", "date", "cases", "goal"} <= set(report)
    assert report["benchmark"] == "hostile" and report["goal"] == {"stall_ms": 100}
    assert [case["name"] for case in report["cases"]] == list(CHEAP)
    for case in report["cases"]:
        assert set(case) == CASE_KEYS
        assert case["answer"] == CHEAP[case["name"]], case
        assert case["left_running"] == [] and case["raised"] is None and case["interrupted_in"] is None, case
        assert isinstance(case["longest_stall_ms"], float) and isinstance(case["answered_s"], float)
    [saved] = (paths.data_dir() / "bench").glob("bench-hostile-*.json")
    assert json.loads(saved.read_text(encoding="utf-8")) == report


def test_an_unknown_case_is_refused_with_the_list(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert run_hostile_bench(["search-nul", "no-such-case"], as_json=True) == 2
    err = capsys.readouterr().err
    assert "no case no-such-case" in err and "attach-pdf-2000-pages" in err
    assert not (paths.data_dir() / "bench").exists()
