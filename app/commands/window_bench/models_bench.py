"""`nalar bench models [--json]`: the model browser's search, from the query to every result's verdict on screen,
for 50 results, cold (no verdict cached) and cached, with the window's longest stall while they arrive.

The hub is the tests' fake hub (tests/support/bench_hub.py: Qwen3-like repos whose listing claims gigabytes),
started as a child process on 127.0.0.1, so the app imports nothing from tests/ and the hub's threads don't share
the window's GIL, as a real hub would not. The browser is the window's own (Engine → Choose model…), on the app's
own Qt start-up; its data and cache dirs are a temporary folder, so the cold round finds no cached verdict and the
user's library and queue are never touched. Goals: ≤ 3 s cold, ≤ 1 s cached, no stall over 50 ms.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.commands.hostile.measure import StallWitness
from app.commands.jobs import machine_description, report_stem, save_json, sibling
from app.commands.window_bench.harness import (
    StallMeter,
    bench_window,
    close_bench_window,
    close_ui_loop,
    scratch_history,
    wait,
)
from app.core.settings.settings import Settings

RESULTS = 50
QUERY = "qwen3"
GOALS = {"cold_s": 3.0, "cached_s": 1.0, "stall_ms": 50.0}
_ROOT = Path(__file__).resolve().parents[3]
HUB_MODULE = "tests.support.bench_hub"


@dataclass
class Round:
    name: str  # "cold" or "cached"
    seconds: float  # the query started → the last verdict shown
    first_result_s: float  # the query started → the first row shown
    longest_stall_ms: float
    results: int
    with_verdicts: int
    stalled_in: str | None = None  # where the GUI thread was during the longest stall past the goal


@contextlib.contextmanager
def fake_hub(count: int) -> Iterator[str]:
    """The fake hub as a child process serving ``count`` repos; its endpoint. Needs the checkout's tests/."""
    if not (_ROOT / "tests" / "support" / "bench_hub.py").exists():
        raise SystemExit("nalar bench models: the fake hub (tests/support/bench_hub.py) is not here; run the "
                         "bench from a source checkout (git clone), where tests/ is.")
    child = subprocess.Popen([sys.executable, "-m", HUB_MODULE, str(count)], cwd=_ROOT, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        endpoint = child.stdout.readline().strip()
        if not endpoint.startswith("http://"):
            raise SystemExit(f"nalar bench models: the fake hub did not start (it said {endpoint!r}); run "
                             f"`python -m {HUB_MODULE}` in the checkout to see why.")
        yield endpoint
    finally:
        if child.stdin is not None:
            child.stdin.close()  # the hub's signal to end
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)


@contextlib.contextmanager
def scratch_dirs(endpoint: str) -> Iterator[None]:
    """Data, cache and config dirs of the bench's own, and the fake hub as HF_ENDPOINT, for the rounds only."""
    folder = Path(tempfile.mkdtemp(prefix="nalar-bench-models-"))
    names = ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "HF_HOME", "HF_ENDPOINT")
    before = {name: os.environ.get(name) for name in names}
    for name in names[:4]:
        os.environ[name] = str(folder / name.lower())
    os.environ["HF_ENDPOINT"] = endpoint
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(folder, ignore_errors=True)


def shown(browser: Any) -> tuple[int, int]:
    """(rows on screen, rows whose verdict is on screen), read from the list's own model."""
    rows = browser.discover.results.rows.rows
    return len(rows), sum(1 for row in rows if "working out" not in row.text)


def search_round(loop: Any, browser: Any, name: str) -> Round:
    """One search typed into Discover as the user does (the debounce skipped: Return), measured to the last verdict."""
    discover = browser.discover
    discover.search_box.setText("")
    discover.search_box.returnPressed.emit()
    wait(loop, lambda: not discover.search.busy, 60)
    gc.collect()
    meter = StallMeter()
    meter.start()
    witness = StallWitness(meter, GOALS["stall_ms"] / 1000)
    witness.start()
    started = time.perf_counter()
    discover.search_box.setText(QUERY)
    discover.search_box.returnPressed.emit()
    first: list[float] = []

    def done() -> bool:
        count, with_verdicts = shown(browser)
        if count and not first:
            first.append(time.perf_counter() - started)
        return count >= RESULTS and with_verdicts == count

    wait(loop, done, 120)
    seconds = time.perf_counter() - started
    stall = meter.stop()
    stalled_in = witness.stop()
    count, with_verdicts = shown(browser)
    return Round(name, round(seconds, 3), round(first[0] if first else seconds, 3), round(stall * 1000, 1), count,
                 with_verdicts, stalled_in)


def bench_models() -> dict[str, Any]:
    from app.engine.scripted import ScriptedEngineDouble

    load = [round(os.getloadavg()[0], 2)]
    with fake_hub(RESULTS + 10) as endpoint, scratch_dirs(endpoint):
        window, loop = bench_window(ScriptedEngineDouble(), Settings(), history=scratch_history())
        try:
            browser = window.dialogs.open_model_browser()
            hub = browser.hub
            wait(loop, lambda: hub.machine is not None and bool(browser.discover.catalog), 120)
            rounds = [search_round(loop, browser, "cold"), search_round(loop, browser, "cached")]
            budget = hub.machine.budget.describe()
            browser.reject()
        finally:
            close_bench_window(window)
            close_ui_loop()
    load.append(round(os.getloadavg()[0], 2))
    return {"benchmark": "models", "machine": machine_description(), "date": time.strftime("%Y-%m-%d %H:%M"),
            "load_average_1min": load, "query": QUERY, "results": RESULTS, "budget": budget,
            "rounds": [asdict(r) for r in rounds], "goals": GOALS}


def render(report: dict[str, Any]) -> str:
    goals = report["goals"]
    lines = [f"machine: {report['machine']}", f"verdicts for: {report['budget']}",
             f"load average (1 min) before, after: {report['load_average_1min']}", "",
             f"{'round':8} {'to all verdicts':>16} {'first row':>10} {'longest stall':>14} {'rows':>5} goal"]
    for r in report["rounds"]:
        goal = goals["cold_s"] if r["name"] == "cold" else goals["cached_s"]
        met = "met" if r["seconds"] <= goal and r["longest_stall_ms"] <= goals["stall_ms"] else "MISSED"
        lines.append(f"{r['name']:8} {r['seconds']:>14.2f} s {r['first_result_s']:>8.2f} s "
                     f"{r['longest_stall_ms']:>11.1f} ms {r['with_verdicts']:>5} ≤ {goal:g} s, stall ≤ "
                     f"{goals['stall_ms']:g} ms: {met}")
        if r.get("stalled_in"):
            lines.append(f"  {r['name']}: the longest stall past the goal was in {r['stalled_in']}")
    return "\n".join(lines)


def run_models_bench(*, as_json: bool) -> int:
    report = bench_models()
    out = save_json(sibling(report_stem("bench", "bench-models"), ".json"), report)
    print(json.dumps(report, indent=2) if as_json else f"{render(report)}\n\nsaved: {out}")
    return 0
