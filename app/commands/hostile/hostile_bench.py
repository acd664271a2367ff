"""`nalar bench hostile [--json] [--only NAME…]`: every hostile input of the safety rounds, given to the real window
(offscreen where there is no display, the scripted engine where an engine is needed), one window each.

Per case: the window's longest stall while it handles the input, the time until it shows the result or the message,
and the child processes left running once it has closed. Goal: no stall over 100 ms, every input answered within
its deadline, nothing left running. Results print as a table (or JSON) and are saved under the data dir's bench/.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.commands.hostile.cases import CASE_NAMES, CASES
from app.commands.hostile.measure import GOAL_STALL_MS, CaseResult, measure
from app.commands.jobs import machine_description, report_stem, save_json, sibling
from app.commands.window_bench.harness import close_ui_loop


def bench_hostile(only: Sequence[str] | None = None) -> dict[str, Any]:
    """The cases named in ``only`` (all by default), in the table's order; their inputs made in a temporary folder."""
    cases = [case for case in CASES if not only or case.name in only]
    root = Path(tempfile.mkdtemp(prefix="nalar-bench-hostile-"))
    load = [round(os.getloadavg()[0], 2)]
    results: list[CaseResult] = []
    try:
        for case in cases:
            results.append(measure(case, root))
            print(f"nalar bench hostile: {_line(results[-1])}", file=sys.stderr, flush=True)
    finally:
        close_ui_loop()
        shutil.rmtree(root, ignore_errors=True)
    load.append(round(os.getloadavg()[0], 2))
    return {"benchmark": "hostile", "machine": machine_description(), "date": time.strftime("%Y-%m-%d %H:%M"),
            "load_average_1min": load, "display": _display(), "cases": [result.to_dict() for result in results],
            "goal": {"stall_ms": GOAL_STALL_MS}}


def _display() -> str:
    """Where the windows were drawn: Qt's offscreen platform, or an X server (Xvfb under ``xvfb-run``)."""
    if os.environ.get("QT_QPA_PLATFORM", "").startswith("offscreen"):
        return "Qt's offscreen platform"
    return f"X display {os.environ['DISPLAY']}" if os.environ.get("DISPLAY") else "a Wayland display"


def _line(result: CaseResult) -> str:
    answered = f"{result.answered_s:.2f} s" if result.answered_s is not None else f"none in {result.deadline_s:g} s"
    stall = "–" if result.longest_stall_ms is None else f"{result.longest_stall_ms:,.1f} ms"
    return f"{result.name}: {result.answer}, {answered}; longest stall {stall}"


def render(report: dict[str, Any]) -> str:
    """The table, then a line for each case past a goal: what it waited for, where the GUI thread was held."""
    goal = report["goal"]["stall_ms"]
    lines = [f"machine: {report['machine']}", f"load average (1 min) before, after: {report['load_average_1min']}", "",
             f"{'case':36} {'longest stall':>14} {'answered in':>12}  {'answer':8} left running"]
    notes = []
    for case in report["cases"]:
        stall = case["longest_stall_ms"]
        answered = "–" if case["answered_s"] is None else f"{case['answered_s']:.2f} s"
        running = ", ".join(case["left_running"]) or "nothing"
        lines.append(f"{case['name']:36} {'–' if stall is None else f'{stall:,.1f} ms':>14} {answered:>12}  "
                     f"{case['answer']:8} {running}")
        for key in ("waiting_for", "raised", "interrupted_in"):
            if case[key]:
                notes.append(f"  {case['name']}: {key.replace('_', ' ')}: {case[key]}")
        if case["stalled_in"] and stall is not None and stall > goal:
            notes.append(f"  {case['name']}: stalled in {case['stalled_in']}")
    over = sum(1 for case in report["cases"] if (case["longest_stall_ms"] or 0) > goal)
    unanswered = sum(1 for case in report["cases"] if case["answer"] == "timeout")
    leaving = sum(1 for case in report["cases"] if case["left_running"])
    lines += ["", f"goal: no stall over {goal} ms ({over} over), every input answered in time ({unanswered} not), "
                  f"nothing left running ({leaving} left something)", *notes]
    return "\n".join(lines)


def run_hostile_bench(only: Sequence[str] | None, *, as_json: bool) -> int:
    unknown = sorted(set(only or ()) - set(CASE_NAMES))
    if unknown:
        print(f"nalar bench hostile: no case {', '.join(unknown)}; the cases are: {', '.join(CASE_NAMES)}",
              file=sys.stderr)
        return 2
    report = bench_hostile(only)
    out = save_json(sibling(report_stem("bench", "bench-hostile"), ".json"), report)
    print(json.dumps(report, indent=2) if as_json else f"{render(report)}\n\nsaved: {out}")
    return 0
