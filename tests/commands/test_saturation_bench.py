"""`nalar bench saturation` run for real: a child process on the embedded model with the CPU plan's pool,
8 MiB in 32-token blocks (10 usable blocks in bf16, 21 in fp8). A 96-token chat needs 4 blocks to start
and 6 by its 75th output token, so 2 chats (bf16) or 4 (fp8) all start, then outgrow the pool: vLLM must
preempt, the stat logger must count it, and the knee must be where the planner predicts it (a planner that
assumed vLLM's default 128-token blocks would put it elsewhere). (With prompts that fill the pool, a second
chat arriving a step late on a loaded machine only waited: the recorded series in tests/data keep that
case.) Then SIGTERM mid-sweep."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.commands.saturation import WARM_UP
from app.core.measure.job_lines import parse_job_line
from app.core.measure.saturation import series_from_dict, summarise_cell
from app.engine.machine import capability
from tests.conftest import require_embedded_model, xdg_dirs
from tests.support.bench_jobs import finish_bench, group_processes, is_png, sigterm_once

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ("--contexts", "96", "--concurrency", "1,2,4", "--tokens", "75", "--rounds", "1", "--kv-pool-mib", "8",
         "--target-x", "50")  # a loose target: the row must reach the KV knee, not stop at a noisy latency knee
EXPECTED_KNEE = {"auto": 2, "fp8_e4m3": 4}


def start_sweep(xdg: Path, *args: str) -> subprocess.Popen[str]:
    """`python -m app bench saturation …` in its own session, with its own XDG dirs."""
    require_embedded_model()
    env = dict(os.environ, PYTHONPATH=str(ROOT), **xdg_dirs(xdg))
    return subprocess.Popen([sys.executable, "-m", "app", "bench", "saturation", *args], cwd=ROOT, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real sweep of both dtypes (fp8 only where this CPU runs it), shared by the tests below."""
    xdg = tmp_path_factory.mktemp("saturation-xdg")
    proc = start_sweep(xdg, "--progress-jsonl", "--keep-series", *SWEEP)
    out, err = finish_bench(proc, timeout=1500)
    lines = [line for line in map(parse_job_line, out.splitlines()) if line is not None]
    return {"proc": proc, "err": err, "out": out, "lines": lines, "xdg": xdg}


@pytest.mark.real_engine
def test_the_sweep_speaks_job_lines_and_saves_json_png_and_the_latest_profile(sweep: dict[str, Any]) -> None:
    proc, lines = sweep["proc"], sweep["lines"]
    assert proc.returncode == 0, sweep["err"][-3000:]
    assert len(lines) == len(sweep["out"].splitlines()), "stdout carries job lines only (chatter goes to stderr)"
    fractions = [line.fraction for line in lines if line.event == "progress"]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0  # type: ignore[type-var]
    assert any(line.message == "auto: 96-token chats × 2" for line in lines)
    report = lines[-1].data
    assert lines[-1].event == "result" and report is not None
    saved = Path(report["json"])
    assert json.loads(saved.read_text())["runs"] == report["runs"]
    assert report["warm_up"] == WARM_UP, "the report says how the engine was warmed up before the first cell"
    assert json.loads((saved.parent / "saturation-latest.json").read_text())["json"] == report["json"]
    assert is_png(Path(report["png"]))
    assert report["kv_pool_mib"] == 8 and report["contexts"] == [96] and report["output_tokens"] == 75
    assert group_processes(proc.pid) == [], "the sweep left processes behind"


@pytest.mark.real_engine
@pytest.mark.parametrize("dtype", ["auto", "fp8_e4m3"])
def test_preemptions_are_counted_and_the_kv_knee_is_where_the_planner_said(sweep: dict[str, Any], dtype: str) -> None:
    reason = capability.kv_dtype_unsupported_reason(dtype, capability.probe_hardware())
    report = sweep["lines"][-1].data
    assert report is not None, sweep["err"][-3000:]
    run = next(r for r in report["runs"] if r["kv_cache_dtype"] == dtype)
    if reason is not None:
        assert run["supported"] is False and run["reason"] == reason and run["rows"] == []
        assert f"{dtype}: not run here" in run["sentence"]
        pytest.skip(f"{dtype} does not run on this machine: {reason}")
    assert run["supported"], run["reason"]
    (row,) = run["rows"]
    cells = {cell["concurrency"]: cell for cell in row["cells"]}
    knee = EXPECTED_KNEE[dtype]
    assert row["predicted_kv_knee"] == knee
    assert run["predicted_capacity_tokens"] == run["kv_capacity_tokens"]  # the planner's arithmetic, exactly
    assert row["kv_knee"] == knee, row
    assert cells[1]["preemptions"] == 0 and cells[1]["peak_kv_usage"] < 0.95 and not cells[1]["waited"]
    # All chats' prompts fit, then their outputs outgrow the pool: vLLM preempts (and recomputes).
    assert cells[knee]["preemptions"] > 0 and cells[knee]["peak_kv_usage"] >= 0.95
    assert cells[knee]["ms_per_token_p95"] > 0 and cells[knee]["ttft_p50_s"] > 0
    assert run["sentence"].startswith(f"{dtype}: ")
    # The saved series give back the same cells: the knee logic reads what the run recorded.
    series = [s for s in json.loads(Path(report["series"]).read_text()) if s["kv_cache_dtype"] == dtype]
    again = {s["concurrency"]: summarise_cell(series_from_dict(s), total_blocks=s["total_blocks"],
                                              block_size=s["block_size"]) for s in series}
    assert {c: (r.preemptions, round(r.peak_kv_usage, 4)) for c, r in again.items()} == \
        {c: (cell["preemptions"], cell["peak_kv_usage"]) for c, cell in cells.items()}


@pytest.mark.real_engine
def test_sigterm_mid_sweep_ends_the_engine_and_leaves_no_process(tmp_path: Path) -> None:
    proc = start_sweep(tmp_path / "xdg", "--progress-jsonl", "--kv-dtypes", "auto", "--contexts", "512",
                       "--concurrency", "1,2", "--tokens", "400", "--rounds", "1", "--max-model-len", "1024",
                       "--kv-pool-mib", "32")
    cancelled = sigterm_once(proc, lambda line: "chats ×" in line.message)  # the first cell runs
    assert proc.returncode == 1, cancelled.stderr[-2000:]
    assert cancelled.seconds < 60
    assert cancelled.last.event == "error" and "cancelled" in cancelled.last.message
    assert not list((tmp_path / "xdg").rglob("saturation-*.json")), "a cancelled sweep saves no result"


def test_bad_sweep_options_are_named(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cases = [(["--kv-pool-mib", "4"], "kv-pool-mib is 8 or more"),
             (["--contexts", "4000", "--max-model-len", "1024"], "no context leaves room"),
             (["--kv-dtypes", "fp4"], "fp8_e4m3")]
    for args, expected in cases:
        bad = subprocess.run([sys.executable, "-m", "app", "bench", "saturation", "--progress-jsonl", *args],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert bad.returncode == 1, bad.stderr[-2000:]
        error = parse_job_line(bad.stdout.strip().splitlines()[-1])
        assert error is not None and error.event == "error"
        assert expected in error.message + error.fix, (args, error)
