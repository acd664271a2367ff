#!/usr/bin/env python3
"""The figures the docs quote, made from the results files in docs/results/, so that they can't go stale.

    python packaging/figures.py             rewrite every generated block in README.md and docs/**/*.md
    python packaging/figures.py --check     exit 1, naming each block whose text differs from its results file
    python packaging/figures.py --suite-from-junit FAST.xml REAL.xml --setup-s N --total-s N
        write docs/results/suite.json from pytest's junit-xml (`--junit-xml`) of `make test`'s two parts
        (--fast-workers and --real-workers: the -n each part ran with, default 2; --machine, --main-at and
        --date default to this machine, `git rev-parse --short HEAD` and today; --out: another path)

A generated block is Markdown between two markers, rewritten whole from its results file:

    <!-- figures:suite -->
    ...made by RENDER["suite"]...
    <!-- /figures:suite -->

Test counts, suite times and benchmark results belong inside such blocks and nowhere else.

docs/results/suite.json, the test suite (written by `make test` through --suite-from-junit):

    {"date": "YYYY-MM-DD", "machine": str, "main_at": str, "setup_s": float,
     "fast": {"passed": int, "failed": int, "skipped": int, "xfailed": int, "seconds": float, "workers": int},
     "real_engine": {the same keys}, "total_s": float}

After writing it, run this script once more without options, so the blocks quoting it follow (tests/test_figures.py
fails while a block and its results file differ).

The other files are the benchmarks' own JSON, as `nalar bench …` writes it (each run's is saved in the data
dir's bench/ folder; copy the one to quote here). A file transcribed from an older run's Markdown says so in a
"source" field. Stdlib only: it runs before the venv exists.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"<!-- figures:(?P<name>[a-z0-9-]+) -->\n(?P<body>.*?)<!-- /figures:(?P=name) -->", re.S)
MARKER = re.compile(r"<!-- /?figures:([a-z0-9-]+) -->")


def markdown_files(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


# ---- formatting --------------------------------------------------------------------------------

def num(x: float | int | None, digits: int | None = None) -> str:
    """A figure as recorded (1,144; 9.3; 0.51), or to ``digits`` decimals; "–" for one the run did not record."""
    if x is None:
        return "–"
    if digits is not None:
        return f"{x:,.{digits}f}"
    if float(x).is_integer():
        return f"{int(x):,}"
    whole, _, decimals = repr(float(x)).partition(".")
    return f"{int(whole):,}.{decimals}" if "e" not in decimals else f"{x:,}"


def duration(seconds: float) -> str:
    """4 min 49 s, 21 min 11 s, 52 s."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    return f"{whole // 60} min" + (f" {whole % 60} s" if whole % 60 else "")


def minutes(seconds: float) -> str:
    return f"{round(seconds / 60)} min"


def pct(share: float | None, digits: int = 0) -> str:
    return "–" if share is None else f"{share * 100:.{digits}f} %"


def table(headers: list[str], rows: list[list[str]], align: str = "") -> str:
    """A Markdown table; ``align`` is one letter per column (l or r), left by default."""
    marks = ["--:" if a == "r" else "---" for a in align.ljust(len(headers), "l")]
    lines = [headers, marks, *rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines) + "\n"


def machine(m: dict[str, Any] | str) -> str:
    """The machine a report names (`machine_description()` in app/commands/jobs.py), in words."""
    if isinstance(m, str):
        return m
    flags = "AVX-512" if m.get("avx512") else "AVX2 only"
    flags += ", AMX" if m.get("amx") else ", no AMX"
    gpus = ", ".join(m.get("gpus") or []) or "no GPU"
    return f"{m.get('cores', '?')}-core {m.get('cpu', '?')} ({flags}), {gpus}, {m.get('engine', '?')}"


def measured(report: dict[str, Any], m: dict[str, Any] | str | None = None) -> str:
    """The line under each benchmark's figures: when, where, under what load, and whether transcribed."""
    where = machine(m if m is not None else report.get("machine", "?"))
    note = f"; {report['note']}" if report.get("note") else ""
    code = f" (code: {report['code']})" if report.get("code") else ""
    line = f"*Measured {report.get('when') or report.get('date', '?')}{code} on a {where}{note}.*"
    return line + (f" *Source: {report['source']}.*\n" if report.get("source") else "\n")


# ---- the results files ---------------------------------------------------------------------------

class Results:
    """docs/results/*.json of one checkout, each read once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._cache: dict[str, Any] = {}

    def __call__(self, name: str) -> Any:
        if name not in self._cache:
            self._cache[name] = json.loads((self.folder / f"{name}.json").read_text(encoding="utf-8"))
        return self._cache[name]


def first_result(report: dict[str, Any], benchmark: str) -> dict[str, Any]:
    return next(r for r in report["results"] if r.get("benchmark") == benchmark)


# ---- the suite ----------------------------------------------------------------------------------

def part_tests(part: dict[str, Any]) -> int:
    return part["passed"] + part["failed"] + part["skipped"] + part["xfailed"]


def part_outcome(part: dict[str, Any]) -> str:
    extra = [f"{part[k]:,} {k}" for k in ("failed", "skipped", "xfailed") if part[k]]
    return f"{part['passed']:,} passed" + (f", {', '.join(extra)}" if extra else "")


def render_suite(r: Results) -> str:
    s = r("suite")
    fast, real = s["fast"], s["real_engine"]
    return (f"Last measured ({s['date']}, main at {s['main_at']}, on a {s['machine']}): `make test` took "
            f"**{minutes(s['total_s'])}** in all: set-up about {minutes(s['setup_s'])}, the fast part "
            f"{part_tests(fast):,} tests in {duration(fast['seconds'])} ({fast['workers']} workers), the "
            f"real-engine part (real models too) {part_tests(real):,} tests in {duration(real['seconds'])} "
            f"({real['workers']} workers).\n")


def render_suite_table(r: Results) -> str:
    s = r("suite")
    rows = [[name, part_outcome(part), str(part["workers"]), duration(part["seconds"])]
            for name, part in (("fast (`-m \"not (real_engine or real_model)\"`)", s["fast"]),
                               ("real engine and models (`-m \"real_engine or real_model\"`)", s["real_engine"]))]
    rows.append(["set-up (`make setup-test`)", "", "", duration(s["setup_s"])])
    rows.append(["**`make test` in all**", "", "", f"**{duration(s['total_s'])}**"])
    return table(["part", "tests", "workers", "time"], rows, "llrr") + \
        f"\n*Measured {s['date']}, main at {s['main_at']}, on a {s['machine']}.*\n"


def render_suite_files(r: Results) -> str:
    s = r("suite")
    parts = [(name, s[key]) for name, key in (("real engine", "real_engine"), ("fast", "fast"))]
    rows = [[name, f"`{row['file']}`", str(row["tests"]), duration(row["seconds"])]
            for name, part in parts for row in part.get("slowest_files", [])]
    if not rows:
        return "*This run's results file has no per-file times.*\n"
    return table(["part", "file", "tests", "time (its tests added up)"], rows, "llrr") + \
        f"\n*Measured {s['date']}, main at {s['main_at']}, on a {s['machine']}.*\n"


# ---- the UI and the engine -----------------------------------------------------------------------

def ui_runs(r: Results, benchmark: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(run, result) for every run of ``benchmark`` in bench-ui.json, oldest first."""
    return [(run, res) for run in r("bench-ui")["runs"] for res in run["results"] if res["benchmark"] == benchmark]


def span(values: list[float], unit: str) -> str:
    low, high = min(values), max(values)
    return f"{num(low)} {unit}" if low == high else f"{num(low)}–{num(high)} {unit}"


def render_ui_maths_stall(r: Results) -> str:
    runs = ui_runs(r, "ui-synthetic-maths")
    stalls = [res["longest_ui_stall_ms"] for _, res in runs]
    run = runs[-1][0]
    return (f"With a 5,000 tok/s stream carrying a formula every 20 words, the window's longest stall was "
            f"{span(stalls, 'ms')} in {len(stalls)} runs (goal ≤ 50 ms; `nalar bench ui`, {run['when']} at "
            f"{run['code']}, on a {machine(run['machine'])}).\n")


def render_bench_ui(r: Results) -> str:
    data = r("bench-ui")
    synthetic = ui_runs(r, "ui-synthetic")
    maths = ui_runs(r, "ui-synthetic-maths")
    run = maths[-1][0]
    ranges = data.get("ranges", {}).get("ui-synthetic-maths", {})
    rows = [[f"{i}", num(plain['longest_ui_stall_ms']), num(m['longest_ui_stall_ms'])]
            for i, ((_, plain), (_, m)) in enumerate(zip(synthetic, maths), 1)]
    out = table(["run", "plain stream, the first send: longest stall (ms)", "maths stream: longest stall (ms)"],
                rows, "lrr")
    if ranges:
        taken, after = ranges["seconds_taken"], ranges["formulas_in_place_s_after_the_stream"]
        out += (f"\nThe maths stream took {span(taken, 's')} for 10 s planned; every formula was in place "
                f"{span(after, 's')} after it.\n")
    return out + "\n" + measured(run) + f"*Source: {data['source']}.*\n"


def render_bench_ui_real(r: Results) -> str:
    run, res = ui_runs(r, "ui-real")[-1]
    rows = [["longest UI stall while the engine loads", f"{num(res['longest_ui_stall_while_loading_ms'])} ms",
             "≤ 250 ms"],
            ["raw AsyncLLM, median tok/s (runs)",
             f"{num(res['raw_asyncllm_tok_s'], 2)} ({', '.join(num(x) for x in res['raw_runs'])})", ""],
            ["through the window, median tok/s (runs)",
             f"{num(res['through_window_tok_s'], 2)} ({', '.join(num(x) for x in res['window_runs'])})", ""],
            ["**ratio**", f"**{num(res['ratio'], 2)}**", "≥ 0.97"],
            ["window process CPU while streaming",
             f"{pct(res['app_process_cpu_share_while_streaming'], 1)} of one core "
             f"(engine process {pct(res['engine_process_cpu_share_while_streaming'], 1)})", ""]]
    thread = ui_runs(r, "ui-thread")
    out = table(["", "measured", "goal"], rows)
    if thread:
        trun, tres = thread[-1]
        sends = [f"{k.split(':')[0]}: {num(v)} ms" for k, v in tres.items() if k.startswith("send after")]
        out += (f"\n`ui-thread`, a send in a long conversation of {tres['answer_words']}-word answers: "
                f"{'; '.join(sends)} ({trun['when']} at {trun['code']}).\n")
    return out + "\n" + measured(run) + f"*Source: {r('bench-ui')['source']}.*\n"


def render_engine_speed(r: Results) -> str:
    run, res = ui_runs(r, "ui-real")[-1]
    return (f"On the CPU engine the embedded model streamed about {round(res['through_window_tok_s'])} tok/s "
            f"through the window on a {machine(run['machine'])} ({run['when']}, `nalar bench ui`).\n")


def render_bench_engine(r: Results) -> str:
    report = r("bench-engine")
    res = first_result(report, "engine")
    ratio = res.get("ratio") or res["engine_layer_tok_s"] / res["raw_asyncllm_tok_s"]
    rows = [["raw `AsyncLLM.generate`", num(res["raw_asyncllm_tok_s"])],
            ["through `EngineHost.generate`", num(res["engine_layer_tok_s"])],
            ["**ratio**", f"**{num(ratio, 2)}**"],
            ["loop guard, µs per token (share of decode)",
             f"{num(res['loop_guard_us_per_token'], 2)} ({res['loop_guard_share_of_decode']})"],
            ["engine load", f"{num(res['load_seconds'])} s"]]
    return table(["", "tok/s (decode, median)"], rows, "lr") + "\n" + measured(report)


# ---- start-up and the history --------------------------------------------------------------------

HISTORY_ROWS = (("window shown with 10,000 chats, from process start", "window shown, from process start: ms", 1500),
                ("window shown, empty history", "window shown with an empty history, from process start: ms", None),
                ("start-up's data part: open the store, list the chats",
                 "open the store and list every conversation (start-up's data part): ms", None),
                ("search p50 / p95 / max (200 queries)", ("search p50: ms", "search p95: ms", "search max: ms"), 50),
                ("search for a word being typed (worst prefix)",
                 "search for a word being typed (prefix), worst: ms", None),
                ("open a 500-turn chat", "open a 500-turn chat (rows + what the model reads): ms", 150),
                ("a send after 500 turns", "a send after 500 turns (Nalar's own work): ms", 5))


def render_bench_history(r: Results) -> str:
    data = r("bench-history")
    timed = [run for run in data["runs"] if "window shown, from process start: ms" in run]
    rows = []
    for label, keys, goal in HISTORY_ROWS:
        cells = []
        for run in timed:
            if isinstance(keys, tuple):
                cells.append(" / ".join(num(run[k]) for k in keys) + " ms" if all(k in run for k in keys) else "–")
            else:
                cells.append(f"{num(run[keys])} ms" if keys in run else "–")
        rows.append([label, *cells, "" if goal is None else f"≤ {goal:,} ms"])
    out = table(["step", *(run["when"] for run in timed), "goal"], rows, "l" + "r" * len(timed) + "r")
    for run in data["runs"]:
        if "of which the index" in run:
            out += (f"\nBytes written per streamed token (a partial save every {run['partial save every (tokens)']} "
                    f"tokens): {num(run['bytes written per streamed token, with the index'])}, of which the search "
                    f"index {num(run['of which the index'])} ({run['when']}, {run['note']}).\n")
    return out + "\n" + measured({**timed[0], "when": timed[0]["when"][:10]}, data["machine"]) + \
        f"*Source: {data['source']}.*\n"


def render_startup(r: Results) -> str:
    runs = [run for run in r("bench-history")["runs"] if "window shown, from process start: ms" in run]
    full = [run["window shown, from process start: ms"] for run in runs]
    empty = [run["window shown with an empty history, from process start: ms"] for run in runs]
    return (f"From process start to the window shown: {span(empty, 'ms')} on an empty home, {span(full, 'ms')} "
            f"with 10,000 conversations (`nalar bench history`, {runs[0]['when'][:10]}, machine quiet).\n")


def render_bench_trim(r: Results) -> str:
    report = r("bench-trim")
    res = first_result(report, "trim")
    rows = [[key.removesuffix(" ms").removesuffix(":"), value] for key, value in res.items() if key.endswith(" ms")]
    head = (f"Context {res['context_tokens']:,} tokens, reserve {res['reserve_tokens']:,}; medians of 5 "
            f"(the old way: one run); load average {res['load_average_1min']}.\n\n")
    return head + table(["history", "ms (wall, CPU)"], rows) + "\n" + measured(report)


# ---- models, memory and the KV cache -----------------------------------------------------------

def memory_result(r: Results) -> dict[str, Any]:
    return first_result(r("bench-memory"), "memory")


def ceilings(res: dict[str, Any]) -> dict[str, dict[str, float]]:
    """model → kv dtype → tok/s ceiling, from the keys `nalar bench memory` writes."""
    found: dict[str, dict[str, float]] = {}
    for key, value in res.items():
        if key.endswith(") tok/s ceiling"):
            model, kv = key.removesuffix(") tok/s ceiling").rsplit(" (", 1)
            found.setdefault(model, {})[kv] = value
    return found


def render_memory_ceilings(r: Results) -> str:
    report = r("bench-memory")
    res = memory_result(r)
    rows = [[model, num(kv.get("fp8_e4m3")), num(kv.get("auto"))] for model, kv in ceilings(res).items()]
    return (table(["model", "tok/s ceiling, fp8 KV", "tok/s ceiling, bf16 KV"], rows, "lrr") +
            f"\nAt {num(res['median_gbps'])} GB/s, the median of {len(res['runs_gbps'])} copies "
            f"({', '.join(num(g) for g in res['runs_gbps'])}; load average {res['load_average']}), at 4,096 tokens "
            f"of context (`nalar bench memory`, {report['when']}, on a {machine(report['machine'])}).\n")


def fp8_depth(run: dict[str, Any], depth: int) -> dict[str, Any]:
    return next((d for d in run["depths"] if d["depth"] == depth), {})


def render_qwen3_shape(r: Results) -> str:
    report = r("bench-fp8-qwen3-shape")
    parts = []
    for run in report["runs"]:
        d = fp8_depth(run, report["depths"][0])
        parts.append(f"{num(d['tok_s'])} tok/s with {run['kv_cache_dtype']} KV ({num(d['measured_over_floor'])}× "
                     f"the planner's floor)")
    return (f"A model of Qwen3-0.6B's exact shape with random weights decoded at {' and '.join(parts)} at "
            f"{report['depths'][0]:,} tokens of context, with {num(report['bandwidth']['gb_s'])} GB/s measured "
            f"({report['when'][:10]}, on a {machine(report['machine'])}, {report['note']}).\n")


def render_bench_qwen3_shape(r: Results) -> str:
    report = r("bench-fp8-qwen3-shape")
    rows = []
    for run in report["runs"]:
        rows.append([run["kv_cache_dtype"], "reasoning prompts", f"{num(run['ttft_s'] * 1000, 0)} ms",
                     num(run["ms_per_token"]), num(run["tok_s"]), "", ""])
        for d in run["depths"]:
            rows.append([run["kv_cache_dtype"], f"{d['depth']:,}", f"{num(d['ttft_s'])} s", num(d["ms_per_token"]),
                         num(d["tok_s"]), num(d["floor_ms_per_token"]), f"{num(d['measured_over_floor'])}×"])
    return table(["KV dtype", "context", "TTFT", "ms/token", "tok/s", "floor ms/token", "measured ÷ floor"], rows,
                 "llrrrrr") + "\n" + measured(report)


def render_bench_fp8(r: Results) -> str:
    data = r("bench-fp8")
    first = data["runs"][0]
    caps = [[run["kv_cache_dtype"], f"{run['kv_bytes_per_token']:,}", f"{run['kv_capacity_tokens']:,} tokens",
             f"{num(run['max_concurrency'], 2)}×"] for run in first["runs"]]
    out = table(["KV dtype", "KV bytes/token", "KV capacity (1 GiB)", "max concurrency at 8,192"], caps, "lrrr")
    depths = [1024, 4096, 8127]
    ratios: dict[str, list[float]] = {}
    rows = []
    for n, report in enumerate(data["runs"], 1):
        by = {run["kv_cache_dtype"]: run for run in report["runs"]}
        cells = []
        for key, depth in [*(("ms_per_token", d) for d in depths), ("ttft_s", 4096), ("ttft_s", 8127)]:
            a, f = fp8_depth(by["auto"], depth).get(key), fp8_depth(by["fp8_e4m3"], depth).get(key)
            unit = " s" if key == "ttft_s" else ""
            cells.append(f"{num(a)} → {num(f)}{unit}")
            found = ratios.setdefault(f"{key}{depth}", [])
            if a and f:
                found.append(f / a)
        rows.append([f"{n} ({report['note'].split(';')[0]}; {num(report['bandwidth']['gb_s'])} GB/s)", *cells])
    rows.append([f"fp8 ÷ auto, median of {len(data['runs'])}",
                 *(num(statistics.median(v), 2) if v else "–" for v in ratios.values())])
    out += "\n" + table(["run", "1,024: ms/token", "4,096: ms/token", "8,127: ms/token", "TTFT at 4,096",
                         "TTFT at 8,127"], rows, "lrrrrr")
    return out + "\n" + measured({**first, "when": first["when"][:10], "note": ""}) + \
        f"*Source: {data['source']}.*\n"


def render_cpu_preload(r: Results) -> str:
    report = r("bench-cpu-preload")
    on = [run for run in report["runs"] if run["preload"]]
    off = [run for run in report["runs"] if not run["preload"]]

    def mean(runs: list[dict[str, Any]], get: Callable[[dict[str, Any]], float]) -> float:
        return statistics.mean(get(run) for run in runs)

    figures = [("engine load", lambda run: run["load_seconds"], "s"),
               ("reasoning prompts: TTFT", lambda run: run["ttft_s"], "s"),
               ("reasoning prompts: ms/token", lambda run: run["ms_per_token"], ""),
               *((f"{d:,} deep: {label}", (lambda run, d=d, k=k: fp8_depth(run, d)[k]), unit)
                 for d in (1024, 4096)
                 for label, k, unit in (("TTFT", "ttft_s", "s"), ("ms/token", "ms_per_token", "")))]
    rows = [[label, *(f"{num(get(run))}{' ' + unit if unit else ''}" for run in on + off),
             num(mean(on, get) / mean(off, get), 2)] for label, get, unit in figures]
    heads = [f"{'on' if run['preload'] else 'off'} (run {run['order']})" for run in on + off]
    return table(["", *heads, "on ÷ off, means"], rows, "l" + "r" * (len(heads) + 1)) + "\n" + measured(report)


def quality_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    return [[row["kv_dtype"].removeprefix("fp8_").upper(), row["scales"], pct(row["top1_agreement"], 1),
             num(row["mean_kl"], 4)] for row in results]


def render_kv_check(r: Results) -> str:
    report = r("kv-check")
    rows = [["unrounded", "–", "100.0 %", "0"], *quality_rows(report["results"])]
    return (table(["KV cache", "scales", "top-1 agreement", "mean KL per token"], rows, "llrr") +
            f"\n{report['prompts']} prompts × {report['tokens_per_prompt']} tokens, calibrated from "
            f"{report['calibrated_from']} exchanges.\n\n" + measured(report))


def render_kv_calibrate(r: Results) -> str:
    report = r("kv-calibrate-overflow")
    rows = quality_rows(report["before"]["results"] + report["after"]["results"])
    return table(["KV cache", "scales", "top-1 agreement", "mean KL per token"], rows, "llrr") + "\n" + \
        measured(report)


def render_kv_check_engine(r: Results) -> str:
    report = r("kv-check-engine")
    rows = []
    for run in report["runs"]:
        if not run["supported"]:
            rows.append([run["kv_cache_dtype"], "not run", "", "", ""])
            continue
        rows.append([run["kv_cache_dtype"], f"{run['stream_count']:,}", f"{run['tokens']:,}", str(run["loops"]),
                     pct(run["loop_rate"])])
    reasons = [f"{run['kv_cache_dtype']}: {run['reason']}" for run in report["runs"] if not run["supported"]]
    return (table(["KV cache", "streams", "tokens", "loops", "loop rate"], rows, "lrrrr") +
            "".join(f"\n{reason}\n" for reason in reasons) + "\n" + measured(report))


def render_bench_saturation(r: Results) -> str:
    data = r("bench-saturation")
    full, grid = data["runs"]
    rows = []
    for sweep in full["runs"]:
        if not sweep["supported"]:
            continue
        for row in sweep["rows"]:
            for c in row["cells"]:
                knee = []
                if row["kv_knee"] == c["concurrency"]:
                    knee.append(f"KV (predicted {row['predicted_kv_knee']})")
                if c["concurrency"] in row["latency_knees"]:
                    knee.append("latency")
                rows.append([f"{row['context_tokens']}", str(c["concurrency"]), pct(c["peak_kv_usage"]),
                             str(c["preemptions"]), "yes, for KV" if c["waited_for_kv"] else "no",
                             num(c["ms_per_token_p50"]), num(c["ms_per_token_p95"]), f"{num(c['ttft_p50_s'])} s",
                             ", ".join(knee)])
    auto = next(s for s in full["runs"] if s["supported"])
    out = (f"The default run: **{full['seconds_total']} s** from start to the saved report, "
           f"{num(auto['load_seconds'])} s of it the engine load; KV capacity {auto['kv_capacity_tokens']:,} "
           f"tokens (the planner: {auto['predicted_capacity_tokens']:,}).\n\n")
    out += table(["context", "chats", "peak KV", "preemptions", "waited", "p50 ms/token", "p95 ms/token", "TTFT p50",
                  "knee"], rows, "rrrrlrrrl")
    out += f"\n> {auto['sentence']}\n\n" + measured(full)
    cols = grid["concurrency"]
    rows = [[sweep["kv_cache_dtype"], str(row["context_tokens"]),
             *(num(next((c["ms_per_token_p50"] for c in row["cells"] if c["concurrency"] == n), None)) for n in cols)]
            for sweep in grid["runs"] for row in sweep["rows"]]
    out += "\np50 ms/token by concurrent chats, both KV dtypes (the default sweep):\n\n"
    out += table(["KV dtype", "context", *(str(n) for n in cols)], rows, "lr" + "r" * len(cols))
    return out + "\n" + measured(grid) + f"*Source: {data['source']}.*\n"


# ---- reasoning, tools, maths, speculation, Compare ------------------------------------------------

def render_loop_golden(r: Results) -> str:
    g = r("loop-golden")
    rows = [["real loops (positives)", str(g["positives"]),
             f"**{g['caught']} caught, {g['late']} late, {g['missed']} missed**"],
            ["normal replies (negatives)", str(g["negatives"]), f"**{g['flagged']} flagged**"]]
    delay = g["delay_after_loop_began_tokens"]
    return (table(["", "streams", "result"], rows) +
            f"\n{g['streams']:,} streams, {g['tokens']:,} tokens, replayed in {num(g['replay_s'])} s; caught a median "
            f"of {delay['median']} and at most {delay['max']} tokens after the loop began (or after token 256, where "
            f"the guard starts).\n\n" + measured(g))


def render_tool_fixtures(r: Results) -> str:
    data = r("tool-fixtures")
    rows, fixtures, compared, vllm, nalar = [], 0, 0, 0, 0
    for family, f in data["families"].items():
        fixtures += f["fixtures"]
        if f["vllm_passed"] is None:
            rows.append([family, str(f["fixtures"]), "not run", "not run"])
            continue
        compared += f["fixtures"]
        vllm += f["vllm_passed"]
        nalar += f["nalar_passed"]
        rows.append([family, str(f["fixtures"]), str(f["vllm_passed"]), str(f["nalar_passed"])])
    rows.append(["**all**", f"**{fixtures}** ({compared} compared)", f"**{vllm}**", f"**{nalar}**"])
    out = table(["family", "fixtures", "vLLM's adapter passes", "Nalar passes"], rows, "lrrr")
    probe = data["live_probe"]
    checks = [v for s in probe["scenarios"].values() for v in s.values()]
    out += (f"\nThe live probe (`{probe['command']}` against the local API server, {probe['model']}, "
            f"{probe['when']}): {checks.count('pass')} of {len(checks)} checks pass; every streamed reply equals "
            f"its plain one.\n\n")
    out += table(["scenario", "plain", "stream", "stream = plain"],
                 [[k, v["non_stream"], v["stream"], v["stream_equals_non_stream"]]
                  for k, v in probe["scenarios"].items()])
    return out + "\n" + measured(data)


def render_maths_coverage(r: Results) -> str:
    m = r("bench-maths")
    return (f"On SymPy's own LaTeX test corpus ({m['formulas']:,} formulas nobody here wrote) it draws "
            f"{pct(m['share'], 1)} (`nalar bench maths`, {m['when'][:10]}).\n")


def render_bench_maths(r: Results) -> str:
    m = r("bench-maths")
    row = [f"**{m['drawn']:,} / {m['formulas']:,} ({pct(m['share'], 1)})**", f"{num(m['median_ms'])} ms",
           f"{num(m['p95_ms'])} ms", f"{num(m['slowest_ms'] / 1000, 2)} s"]
    failures = ", ".join(f"`{f}`" for f in m["failures"])
    return (table(["drawn", "median", "p95", "slowest"], [row], "rrrr") + f"\nNot drawn: {failures}.\n\n" +
            measured(m))


def spec_result(r: Results) -> dict[str, Any]:
    return first_result(r("bench-spec"), "spec")


def render_spec_summary(r: Results) -> str:
    report = r("bench-spec")
    res = spec_result(r)
    ngram = next(s for s in res["summary"] if s["method"] == "ngram")
    long = next(p for p in res["per_prompt"] if p["method"] == "ngram" and p["prompt"] == "long thinking")
    return (f"On the embedded model, n-gram gave {num(ngram['thinking_ratio'], 2)}× the thinking and "
            f"{num(ngram['answer_ratio'], 2)}× the answer tok/s of no speculation ({num(long['thinking_ratio'], 1)}× "
            f"on a long, looping thought), on a {machine(report['machine'])} (`nalar bench spec`, "
            f"{report['when'][:10]}).\n")


def spec_rows(summaries: list[dict[str, Any]], with_prompt: bool) -> list[list[str]]:
    return [[*([s["prompt"]] if with_prompt else []), s["method"], num(s["thinking_tok_s"]),
             num(s["thinking_ratio"], 2), num(s["answer_tok_s"]), num(s["answer_ratio"], 2), pct(s["acceptance_rate"]),
             num(s["mean_accepted_length"], 2)] for s in summaries]


def render_bench_spec(r: Results) -> str:
    report = r("bench-spec")
    res = spec_result(r)
    heads = ["method", "thinking tok/s", "× off", "answer tok/s", "× off", "accepted", "tok/step"]
    out = table(heads, spec_rows(res["summary"], False), "lrrrrrr")
    out += "\nPer prompt:\n\n" + table(["prompt", *heads], spec_rows(res["per_prompt"], True), "llrrrrrr")
    rows = [[d["method"], d["prompt"], str(d["token_index"]), str(d["char_index"]), num(d["margin_none"], 3),
             num(d["margin_method"], 3), "near-tie" if d["near_tie"] else "CLEAR MARGIN"] for d in res["divergences"]]
    out += "\nWhere the greedy text parts from no speculation:\n\n" + table(
        ["method", "prompt", "parts at token", "char", "margin off", "margin method", "verdict"], rows, "llrrrrl")
    refused = "; ".join(f"{k}: {v}" for k, v in res["refused"].items())
    return out + (f"\nRefused by vLLM here: {refused}\n" if refused else "") + "\n" + measured(report)


def render_compare_summary(r: Results) -> str:
    report = r("bench-compare")
    res = first_result(report, "compare")
    s = res["summary"]
    together, apart = s["at once"]["median_wall_s"], s["one after another"]["median_wall_s"]
    return (f"On a {machine(report['machine'])}, {len(res['variants'])} variants took "
            f"{num(together, 1)} s at once against {num(apart, 1)} s one after another (`nalar bench compare`, "
            f"{report['when'][:10]}).\n")


def render_bench_compare(r: Results) -> str:
    report = r("bench-compare")
    res = first_result(report, "compare")
    rows = []
    for mode, s in res["summary"].items():
        walls = [f"{num(run['wall_s'], 2)} s" for run in res["runs"] if run["mode"] == mode]
        rows.append([mode, *walls, f"{num(s['median_wall_s'], 2)} s", num(s["tok_s"]), str(s["peak_running"])])
    heads = ["mode", *(f"round {n + 1}" for n in range(res["rounds"])), "median", "tok/s (median)", "running"]
    return (table(heads, rows, "l" + "r" * (len(heads) - 1)) +
            f"\nAt once was **{num(res['speedup'], 2)}× faster** (median against median). Variants: "
            f"{', '.join(res['variants'])}; a think budget of {res['think_budget']} and {res['answer_tokens']} answer "
            f"tokens.\n\n" + measured(report))


# ---- hostile inputs ------------------------------------------------------------------------------

def render_bench_knowledge(r: Results) -> str:
    """`nalar bench knowledge`: first index, a sync with nothing changed, query p50/p95, the window's stall while
    indexing (the window's bench fills it; "–" until then), each against issue 51's goal."""
    report = r("bench-knowledge")
    goal, corpus, index = report["goal"], report["corpus"], report["index"]

    def met(value: float | None, limit: float) -> str:
        return "–" if value is None else ("met" if value <= limit else "**missed**")

    stall, stall_row = report.get("window_stall_ms"), "the window's longest stall while indexing"
    folder = getattr(r, "folder", None)  # a test's stand-in Results may have none
    if stall is None and folder is not None and (folder / "bench-knowledge-window.json").is_file():  # its own bench
        stall, stall_row = r("bench-knowledge-window")["longest_stall_ms"], f"{stall_row} (its own run, below)"
    rows = [["first index", f"{num(report['first_index_s'], 2)} s", f"≤ {num(goal['first_index_s'])} s",
             met(report["first_index_s"], goal["first_index_s"])],
            ["sync with nothing changed (median of 3)", f"{num(report['no_change_sync_s'] * 1000, 0)} ms",
             f"≤ {num(goal['no_change_sync_s'])} s", met(report["no_change_sync_s"], goal["no_change_sync_s"])],
            [f"query p50 ({report['queries']} queries)", f"{num(report['query_p50_ms'], 1)} ms", "", ""],
            [f"query p95 ({report['queries']} queries)", f"{num(report['query_p95_ms'], 1)} ms",
             f"≤ {num(goal['query_p95_ms'])} ms", met(report["query_p95_ms"], goal["query_p95_ms"])],
            [stall_row, "–" if stall is None else f"{num(stall, 1)} ms",
             f"≤ {num(goal['window_stall_ms'])} ms", met(stall, goal["window_stall_ms"])]]
    if (embedding := report.get("embedding")) is not None:  # hybrid ranking: an embedding model was found
        rows += [[f"embedding every passage ({embedding['model']}, {embedding['origin']})",
                  f"{num(embedding['embed_s'], 1)} s", "", f"{num(embedding['passages_per_s'], 1)} passages/s"],
                 ["hybrid query p50", f"{num(embedding['hybrid_query_p50_ms'], 1)} ms", "", ""],
                 ["hybrid query p95", f"{num(embedding['hybrid_query_p95_ms'], 1)} ms",
                  f"≤ {num(goal['query_p95_ms'])} ms", met(embedding["hybrid_query_p95_ms"], goal["query_p95_ms"])]]
    out = table(["measure", "result", "goal", ""], rows, "lrrl")
    out += (f"\nCorpus: {num(corpus['text_pages'])} pages of text in {corpus['text_files']} Markdown files and "
            f"{corpus['pdfs']} PDFs ({num(corpus['pdf_pages'])} pages), {num(corpus['bytes'] / 2**20, 1)} MiB; "
            f"the index: {num(index['files'])} files, {num(index['passages'])} passages, "
            f"{num(index['bytes'] / 2**20, 1)} MiB.\n")
    before, after = report["load_average_1min"]
    memory = f"{num(report['memory_gib'], 0)} GiB of memory; " if report.get("memory_gib") else ""
    note = f"{memory}1-minute load average {num(before)} before the run, {num(after)} after; the machine was shared"
    return out + "\n" + measured({**report, "note": note})


def render_bench_knowledge_window(r: Results) -> str:
    """`nalar bench knowledge-window`: the window's longest stall while Knowledge… indexes the bench's corpus, and a
    question over it (send to the engine's request, the look-up off the GUI thread)."""
    report = r("bench-knowledge-window")
    goal = report["goal"]["longest_stall_ms"]
    stall = report["longest_stall_ms"]
    rows = [["the window's longest stall while indexing", f"{num(stall, 1)} ms", f"≤ {num(goal)} ms",
             "met" if stall <= goal else "**missed**"],
            [f"the same window idle, {num(report['idle_s'], 0)} s just before (the machine's load alone)",
             f"{num(report['idle_longest_stall_ms'], 1)} ms", "", ""],
            ["the sync, through the runner", f"{num(report['sync_in_window_s'], 1)} s", "", ""],
            ["progress signals to the GUI thread", num(report["progress_signals"]), "", ""],
            [f"a question over it: send to the engine's request ({report['ask_passages']} passages)",
             f"{num(report['ask_to_request_ms'], 0)} ms", "", ""],
            ["the window's longest stall meanwhile", f"{num(report['ask_longest_stall_ms'], 1)} ms",
             f"≤ {num(goal)} ms", "met" if report["ask_longest_stall_ms"] <= goal else "**missed**"]]
    out = table(["measure", "result", "goal", ""], rows, "lrrl")
    out += (f"\nIndexed: {num(report['files'])} files, {num(report['passages'])} passages "
            f"({num(report['corpus']['text_pages'])} pages of text, {report['corpus']['pdfs']} PDFs).")
    if report.get("stalled_in"):  # sampled while the loop was held past the goal (the hostile bench's witness)
        out += f" During the longest stall past the goal the GUI thread was {report['stalled_in']}"
        out += "." if report["stalled_in"].startswith("in Qt") else " (Nalar's code)."
    out += "\n"
    before, after = report["load_average_1min"]
    note = f"1-minute load average {num(before)} before the run, {num(after)} after; the machine was shared"
    return out + "\n" + measured({**report, "note": note})


def render_hostile(r: Results) -> str:
    """`nalar bench hostile`: per case the longest stall (bold past the goal), the time to the answer and its kind;
    then where the GUI thread was held past the goal, what timed out, and what was left running."""
    report = r("bench-hostile")
    goal = report["goal"]["stall_ms"]
    rows, notes = [], []
    for case in report["cases"]:
        stall = case["longest_stall_ms"]
        shown = "–" if stall is None else f"{num(stall, 1)} ms"
        when = f"none in {num(case['deadline_s'])} s" if case["answered_s"] is None else \
            f"{num(case['answered_s'], 2)} s"
        rows.append([f"`{case['name']}`", f"**{shown}**" if stall is not None and stall > goal else shown, when,
                     case["answer"]])
        if stall is not None and stall > goal and case.get("stalled_in"):
            notes.append(f"- `{case['name']}`: the GUI thread was held in `{case['stalled_in']}`")
        if case["answer"] == "timeout":
            notes.append(f"- `{case['name']}`: no answer in {num(case['deadline_s'])} s; waited for "
                         f"{case['waiting_for']}")
        for left in case["left_running"]:
            notes.append(f"- `{case['name']}`: left running after close: `{left.split(': ', 1)[-1]}`")
    cases = report["cases"]
    over = sum(1 for case in cases if (case["longest_stall_ms"] or 0) > goal)
    answered = sum(1 for case in cases if case["answer"] != "timeout")
    clean = sum(1 for case in cases if not case["left_running"])
    out = table(["case", "longest stall", "time to answer", "answer"], rows, "lrrl")
    out += (f"\nGoals: no stall over {goal} ms (met in {len(cases) - over} of {len(cases)} cases), every input "
            f"answered within its deadline (met in {answered} of {len(cases)}), nothing left running after close "
            f"(met in {clean} of {len(cases)}).\n")
    if notes:
        out += "\n" + "\n".join(notes) + "\n"
    before, after = report["load_average_1min"]
    note = f"1-minute load average {num(before)} before the run, {num(after)} after"
    if report.get("display"):
        note = f"windows on {report['display']}; {note}"
    return out + "\n" + measured({**report, "note": note})


# ---- the model browser ---------------------------------------------------------------------------

def render_bench_models(r: Results) -> str:
    """`nalar bench models`: per round (cold, cached) the time from the query to the last verdict on screen, to the
    first row, and the longest stall, against the goals."""
    report = r("bench-models")
    goals = report["goals"]
    rows = []
    for run in report["rounds"]:
        goal = goals["cold_s"] if run["name"] == "cold" else goals["cached_s"]
        met = run["seconds"] <= goal and run["longest_stall_ms"] <= goals["stall_ms"]
        rows.append([run["name"], f"{num(run['seconds'], 2)} s", f"≤ {num(goal)} s",
                     f"{num(run['first_result_s'], 2)} s", f"{num(run['longest_stall_ms'], 1)} ms",
                     f"{run['with_verdicts']} of {run['results']}",
                     "met" if met else "**missed**"])
    out = table(["round", "query to every verdict on screen", "goal", "first row", "longest stall", "verdicts",
                 "goals"], rows, "lrrrrrl")
    out += (f"\n{report['results']} results for “{report['query']}”, verdicts for this machine ({report['budget']}); "
            f"stall goal ≤ {num(goals['stall_ms'])} ms.\n")
    notes = [f"- {run['name']}: the GUI thread was held in `{run['stalled_in']}`" for run in report["rounds"]
             if run.get("stalled_in") and run["longest_stall_ms"] > goals["stall_ms"]]
    if notes:
        out += "\n" + "\n".join(notes) + "\n"
    before, after = report["load_average_1min"]
    note = f"1-minute load average {num(before)} before the run, {num(after)} after; the machine was shared"
    return out + "\n" + measured({**report, "note": note})


RENDER: dict[str, Callable[[Results], str]] = {
    "suite": render_suite, "suite-table": render_suite_table, "suite-files": render_suite_files,
    "ui-maths-stall": render_ui_maths_stall, "bench-ui": render_bench_ui, "bench-ui-real": render_bench_ui_real,
    "engine-speed": render_engine_speed, "bench-engine": render_bench_engine,
    "bench-history": render_bench_history, "startup": render_startup, "bench-trim": render_bench_trim,
    "memory-ceilings": render_memory_ceilings, "qwen3-shape": render_qwen3_shape,
    "bench-qwen3-shape": render_bench_qwen3_shape, "bench-fp8": render_bench_fp8, "cpu-preload": render_cpu_preload,
    "kv-check": render_kv_check, "kv-calibrate": render_kv_calibrate, "kv-check-engine": render_kv_check_engine,
    "bench-saturation": render_bench_saturation, "loop-golden": render_loop_golden,
    "tool-fixtures": render_tool_fixtures, "maths-coverage": render_maths_coverage, "bench-maths": render_bench_maths,
    "spec-summary": render_spec_summary, "bench-spec": render_bench_spec,
    "compare-summary": render_compare_summary, "bench-compare": render_bench_compare, "hostile": render_hostile,
    "bench-knowledge": render_bench_knowledge, "bench-knowledge-window": render_bench_knowledge_window,
    "bench-models": render_bench_models,
}


# ---- the blocks ----------------------------------------------------------------------------------

def regenerate(text: str, results: Results, where: str) -> tuple[str, list[str]]:
    """``text`` with every block rewritten, and a line per problem (a marker without its pair, an unknown name,
    a results file missing or not as the render function expects)."""
    problems = []
    opened = [m.group(1) for m in MARKER.finditer(text) if not m.group(0).startswith("<!-- /")]
    closed = [m.group(1) for m in MARKER.finditer(text) if m.group(0).startswith("<!-- /")]
    paired = [m.group("name") for m in BLOCK.finditer(text)]
    for name in sorted(set(opened + closed)):
        if opened.count(name) != paired.count(name) or closed.count(name) != paired.count(name):
            problems.append(f"{where}: figures:{name}: a marker without its pair")

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        render = RENDER.get(name)
        if render is None:
            problems.append(f"{where}: figures:{name}: no render function of that name")
            return match.group(0)
        try:
            body = render(results)
        except (OSError, KeyError, ValueError, TypeError, StopIteration, IndexError) as error:
            problems.append(f"{where}: figures:{name}: can't render from docs/results: {error!r}")
            return match.group(0)
        return f"<!-- figures:{name} -->\n{body}<!-- /figures:{name} -->"

    return BLOCK.sub(replace, text), problems


def stale_blocks(old: str, new: str, where: str) -> list[str]:
    """Each block whose text differs, with its line, e.g. "README.md:40: figures:suite differs"."""
    found = []
    fresh = {(m.group("name"), n): m.group("body") for n, m in enumerate(BLOCK.finditer(new))}
    for n, match in enumerate(BLOCK.finditer(old)):
        if fresh.get((match.group("name"), n)) != match.group("body"):
            line = old.count("\n", 0, match.start()) + 1
            found.append(f"{where}:{line}: figures:{match.group('name')} differs from docs/results")
    return found


def run(root: Path, check: bool) -> int:
    results = Results(root / "docs" / "results")
    problems: list[str] = []
    for path in markdown_files(root):
        if not path.exists():
            continue
        old = path.read_text(encoding="utf-8")
        where = str(path.relative_to(root))
        new, trouble = regenerate(old, results, where)
        problems += trouble
        if check:
            problems += stale_blocks(old, new, where)
        elif new != old:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {where}")
    for line in problems:
        print(line, file=sys.stderr)
    if check and problems:
        print(f"{len(problems)} generated block(s) out of date: run `python packaging/figures.py`", file=sys.stderr)
    return 1 if problems else 0


# ---- suite.json from `make test`'s junit files ---------------------------------------------------

def junit_part(path: Path, workers: int) -> dict[str, Any]:
    """Counts and wall time of one pytest run (its --junit-xml file). pytest writes an xfail as a skip whose
    type is pytest.xfail; a run that collected nothing (exit 5) has a suite of 0 tests."""
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    tests = failed = skipped = xfailed = 0
    seconds = 0.0
    for suite in suites:
        tests += int(suite.get("tests", 0))
        failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
        seconds += float(suite.get("time", 0.0))
        xfailed += sum(1 for case in suite.iter("testcase") for skip in case.findall("skipped")
                       if skip.get("type") == "pytest.xfail")
    return {"passed": tests - failed - skipped, "failed": failed, "skipped": skipped - xfailed, "xfailed": xfailed,
            "seconds": round(seconds, 1), "workers": workers, "slowest_files": slowest_files(suites)}


def slowest_files(suites: list[ElementTree.Element], count: int = 10) -> list[dict[str, Any]]:
    """The test files that took longest (setup, call and teardown of their tests added up): where the time goes."""
    seconds: dict[str, float] = {}
    tests: dict[str, int] = {}
    for suite in suites:
        for case in suite.iter("testcase"):
            name = case.get("classname", "").replace(".", "/") + ".py"
            seconds[name] = seconds.get(name, 0.0) + float(case.get("time", 0.0))
            tests[name] = tests.get(name, 0) + 1
    ranked = sorted(seconds, key=lambda name: -seconds[name])[:count]
    return [{"file": name, "seconds": round(seconds[name], 1), "tests": tests[name]} for name in ranked]


def this_machine() -> str:
    """"2-core AMD EPYC with AVX-512, 23 GiB, no GPU": the words suite.json's "machine" uses."""
    cpu, flags, mem_kib = "unknown CPU", "", 0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu == "unknown CPU":
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = line
        mem_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                       if line.startswith("MemTotal:"))
    except (OSError, StopIteration):
        pass
    simd = " with AMX" if "amx_tile" in flags else " with AVX-512" if "avx512f" in flags else \
        " with AVX2" if "avx2" in flags else ""
    gpu = "NVIDIA GPU" if Path("/proc/driver/nvidia/gpus").is_dir() else "no GPU"
    return f"{os.cpu_count()}-core {cpu}{simd}, {round(mem_kib / 2**20)} GiB, {gpu}"


def head_commit(root: Path) -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def suite_from_junit(fast: Path, real: Path, *, setup_s: float, total_s: float, fast_workers: int = 2,
                     real_workers: int = 2, machine_text: str | None = None, main_at: str | None = None,
                     date: str | None = None, root: Path = ROOT) -> dict[str, Any]:
    return {"date": date or datetime.date.today().isoformat(), "machine": machine_text or this_machine(),
            "main_at": main_at or head_commit(root), "setup_s": round(setup_s, 1),
            "fast": junit_part(fast, fast_workers), "real_engine": junit_part(real, real_workers),
            "total_s": round(total_s, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="figures.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated block differs")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout (default: this script's)")
    parser.add_argument("--suite-from-junit", nargs=2, type=Path, metavar=("FAST.xml", "REAL.xml"))
    parser.add_argument("--setup-s", type=float, help="seconds of set-up before the tests")
    parser.add_argument("--total-s", type=float, help="seconds of the whole `make test`")
    parser.add_argument("--fast-workers", type=int, default=2)
    parser.add_argument("--real-workers", type=int, default=2)
    parser.add_argument("--machine", help="the machine in words (default: read from /proc)")
    parser.add_argument("--main-at", help="the commit measured (default: git rev-parse --short HEAD)")
    parser.add_argument("--date", help="YYYY-MM-DD (default: today)")
    parser.add_argument("--out", type=Path, help="where to write suite.json (default: docs/results/suite.json)")
    args = parser.parse_args(argv)
    if args.suite_from_junit:
        if args.setup_s is None or args.total_s is None:
            parser.error("--suite-from-junit needs --setup-s and --total-s")
        for path in args.suite_from_junit:
            if not path.is_file():
                parser.error(f"{path}: no such junit file (did that pytest run start?)")
        suite = suite_from_junit(*args.suite_from_junit, setup_s=args.setup_s, total_s=args.total_s,
                                 fast_workers=args.fast_workers, real_workers=args.real_workers,
                                 machine_text=args.machine, main_at=args.main_at, date=args.date, root=args.root)
        out = args.out or args.root / "docs" / "results" / "suite.json"
        out.write_text(json.dumps(suite, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {out}")
        return 0
    return run(args.root, args.check)


if __name__ == "__main__":
    sys.exit(main())
