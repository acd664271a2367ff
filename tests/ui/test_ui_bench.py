"""`nalar bench ui`'s synthetic stream, run as the command runs it (its own process, offscreen Qt)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from app.commands.bench_maths import synthetic_maths, synthetic_words

ROOT = Path(__file__).resolve().parents[2]


def test_the_synthetic_text_is_not_a_loop_to_the_loop_guard() -> None:
    """Bug caught: text the guard rightly cuts ("t1 t2 … t12" lines, numbers masked), so the benchmark
    reported the stall of a 0.1 s stream as a 10 s one's."""
    from app.core.settings.settings import LoopGuardConfig
    from app.engine.reply.loop_guard import LoopDetector

    detector = LoopDetector(LoopGuardConfig())
    words = synthetic_words(3000)
    for index, word in enumerate(words):  # one key per chunk, as ReplyStream feeds a backend without ids
        assert detector.feed([hash(word)], word) is None, f"a loop found at token {index}"


def test_the_synthetic_maths_answer_has_formulas_and_is_not_a_loop() -> None:
    """Bug caught: the maths stream's formulas, repeated, cut by the loop guard (the stall of a stream cut short
    reported as a 10 s one's), or no formula opened and closed over tokens (the streaming edge never inside one)."""
    from app.core.chat.answer_markup import Collected, cut_maths
    from app.core.settings.settings import LoopGuardConfig
    from app.engine.reply.loop_guard import LoopDetector

    words = synthetic_maths(3000)
    detector = LoopDetector(LoopGuardConfig())
    for index, word in enumerate(words):
        assert detector.feed([hash(word)], word) is None, f"a loop found at token {index}"
    collected = Collected()
    cut_maths("".join(words), collected)
    assert len(collected.formulas) > 100 and any(f.display for f in collected.formulas)
    assert sum(w.count("$") % 2 == 1 for w in words) > 50, "formulas open in one token and close in another"


def test_the_synthetic_stream_arrives_whole_and_takes_its_planned_time() -> None:
    """Bugs caught: a stream cut short (by the loop guard or an error) still reported as measured; a
    pane that drops or reorders characters under a 5,000 tok/s stream."""
    code = ("import json; from app.commands.window_bench.streams import bench_ui_synthetic; "
            "print(json.dumps(bench_ui_synthetic(rate=5000, seconds=1)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["finish_reason"] == "stop"
    assert result["every_character_arrived"] is True
    assert result["seconds_taken"] >= 1.0  # paced at 5,000 tok/s: it can't end sooner, however fast the machine


def test_the_ui_benches_end_without_a_traceback() -> None:
    """Bug caught: each UI bench made its own qasync loop and one was never closed, so the command ended with
    "Signal source has been deleted" (the loop closed after its Qt objects, from its __del__ at exit)."""
    # The real command's order: a window bench, the thread bench, another window bench (the real engine's).
    code = ("from app.commands.window_bench import streams as bench\n"
            "try:\n    bench.bench_ui_synthetic(seconds=0.5); bench.bench_ui_thread(50); "
            "bench.bench_ui_synthetic(seconds=0.5)\nfinally:\n    bench.close_ui_loop()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))
    assert done.returncode == 0, done.stderr[-2000:]
    noise = [line for line in done.stderr.splitlines() if "propagateSizeHints" not in line]  # Qt's offscreen note
    assert noise == [], done.stderr[-2000:]
