"""`nalar bench …`: engine-layer overhead, UI throughput and stalls, start-up time, trimming.

Targets are checked here, in measurements, not in timed tests. Results print as a
table (or JSON) and are saved under the data dir's bench/ folder.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import psutil

from app.commands.bench_maths import synthetic_maths, synthetic_words
from app.commands.jobs import machine_description, report_stem, save_json, sibling
from app.core.settings.settings import EngineConfig, SamplingConfig, Settings

PROMPT = [{"role": "user", "content": "Explain step by step why the sky is blue."}]
# Long, steady output (so runs rarely stop early at EOS and compare like for like).
COUNTING = "Count from 1 to 400, separated by commas."


def _model_config(**overrides: Any) -> EngineConfig:
    from app.core.models.embedded_model import ensure_embedded_model

    return EngineConfig(model=str(ensure_embedded_model()), max_model_len=2048, **overrides)


# ---- engine: raw AsyncLLM against the engine layer, same engine, same prompt ----------------

async def _layer_run(host: Any, tokens: int, index: int, deltas: list[str] | None = None) -> float:
    from app.engine.events import AnswerDelta, Finished

    first = last = None
    total = 0
    # The loop guard watches as in the app, but only warns: a fixed-length run must not be cut.
    sampling = SamplingConfig(max_tokens=tokens, think_budget=0).with_loop_guard(action="warn")
    async for event in host.generate(PROMPT, sampling, f"layer-{index}", ignore_eos=True):
        if isinstance(event, AnswerDelta):
            if deltas is not None:
                deltas.append(event.text)
            now = time.perf_counter()
            if first is None:
                first = now
            last = now
        elif isinstance(event, Finished):
            assert event.metrics is not None
            total = event.metrics.answer_tokens
    assert first is not None and last is not None, "the engine layer produced no answer"
    return (total - 1) / (last - first)


def loop_guard_us_per_token(deltas: list[str], rounds: int = 5) -> float:
    """The loop detector's own time per token, on a real reply's deltas, watching from the first token
    and never stopping (the worst case: no loop found, every check runs)."""
    from app.core.settings.settings import LoopGuardConfig
    from app.engine.reply.loop_guard import LoopDetector

    config = LoopGuardConfig(start_after_tokens=0)
    best = float("inf")
    for _ in range(rounds):
        detector = LoopDetector(config)
        started = time.perf_counter()
        for text in deltas:
            detector.feed([hash(text)], text)
        best = min(best, time.perf_counter() - started)
    return best * 1e6 / max(1, len(deltas))


def bench_engine(tokens: int, repeats: int = 5) -> dict[str, Any]:
    from app.engine.local.host import EngineHost
    from app.engine.process.bench_entry import raw_run

    host = EngineHost()
    try:
        ready = host.loop_thread.submit(host.start(_model_config(reasoning_mode=False))).result(600)
        raw, layer = [], []
        deltas: list[str] = []
        for index in range(repeats):  # interleaved, so drift hits both sides alike
            raw.append(host.loop_thread.submit(raw_run(host, tokens, index, PROMPT)).result(600))
            deltas.clear()
            layer.append(host.loop_thread.submit(_layer_run(host, tokens, index, deltas)).result(600))
    finally:
        host.close()
    raw_median, layer_median = statistics.median(raw), statistics.median(layer)
    guard_us = loop_guard_us_per_token(deltas)
    return {"benchmark": "engine", "tokens_per_run": tokens, "repeats": repeats,
            "load_seconds": round(ready.load_seconds, 1), "kv_capacity_tokens": ready.kv_capacity_tokens,
            "raw_asyncllm_tok_s": round(raw_median, 2), "engine_layer_tok_s": round(layer_median, 2),
            "ratio": round(layer_median / raw_median, 3), "raw_runs": [round(x, 2) for x in raw],
            "loop_guard_us_per_token": round(guard_us, 2),
            "loop_guard_share_of_decode": f"{guard_us / (1e6 / layer_median):.3%}",
            "layer_runs": [round(x, 2) for x in layer]}


# ---- UI: synthetic 5,000 tok/s stream, and the real engine through the window ---------------

_QT: tuple[Any, Any] | None = None  # the UI benches share one QApplication and one qasync loop


def _qt_app() -> Any:
    """The app's own Qt start-up (app_main.start_qt), made once; ``close_ui_loop`` ends it."""
    global _QT
    if _QT is not None:
        return _QT
    if not (os.environ.get("QT_QPA_PLATFORM") or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        # Without a display Qt's plugin loader aborts the process; the UI benches measure the
        # event loop, not drawing, so the offscreen platform serves them as well.
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        print("nalar bench: no display found; using Qt's offscreen platform", file=sys.stderr)
    from app.ui.app_main import start_qt

    _QT = start_qt([sys.argv[0]])
    return _QT


def close_ui_loop() -> None:
    global _QT
    if _QT is not None:
        from app.ui.app_main import close_qt

        close_qt(*_QT)
        _QT = None


def scratch_history() -> Any:
    """A history of the bench's own, deleted at exit: the UI benches' 50,000-token chats stay out of the user's."""
    import atexit
    import shutil
    import tempfile
    from pathlib import Path

    from app.core.chat.history import HistoryStore

    folder = Path(tempfile.mkdtemp(prefix="nalar-bench-history-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return HistoryStore(folder / "history.sqlite3")


def bench_window(engine: Any, settings: Settings, *, history: Any = None, keys: Any = None) -> tuple[Any, Any]:
    """A window of the app's own start-up (app_main.open_window) on the benches' one Qt app, and its loop: how the
    other benches' modules get a window without importing Qt or ui/."""
    from app.ui.app_main import open_window

    _, loop = _qt_app()
    return open_window(engine, settings, history=history, keys=keys), loop


def close_bench_window(window: Any) -> None:
    """``window`` closed as the user closes it, then what the app's exit ends with it (app_main.end_window)."""
    from app.ui.app_main import end_window

    end_window(window)


def _send(window: Any, text: str) -> None:
    """As the user sends: the prompt typed, then the "send" action (Ctrl+Return, Chat → Send)."""
    window.prompt.setPlainText(text)
    window.menus.trigger("send")


class StallMeter:
    """Longest gap between ticks of a fast timer on the UI loop: how long the UI froze."""

    def __init__(self, interval_ms: int = 2) -> None:
        from PySide6.QtCore import QTimer

        self.interval = interval_ms / 1000
        self.longest = 0.0
        self.last_tick = time.perf_counter()  # read by a watching thread: how long the loop has been held now
        self._timer = QTimer()
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)

    def start(self) -> None:
        self.last_tick = time.perf_counter()
        self.longest = 0.0
        self._timer.start()

    def stop(self) -> float:
        """The longest gap, the one still open counted too (a loop held until now never ticked again)."""
        self._timer.stop()
        self._tick()
        return self.longest

    def _tick(self) -> None:
        now = time.perf_counter()
        self.longest = max(self.longest, now - self.last_tick - self.interval)
        self.last_tick = now


def _wait(loop: Any, condition: Any, timeout: float) -> None:
    import asyncio

    async def until() -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError("benchmark condition not met in time")
            await asyncio.sleep(0.01)

    loop.run_until_complete(until())


def bench_ui_synthetic(rate: int = 5000, seconds: float = 10.0, maths: bool = False) -> dict[str, Any]:
    """``maths``: the answer carries formulas (``synthetic_maths``), which the answer pane draws as they close."""
    from app.engine.scripted import Script, ScriptedEngineDouble
    from app.ui.app_main import open_window

    app, loop = _qt_app()
    words = (synthetic_maths if maths else synthetic_words)(int(rate * seconds))
    thinking = words[: len(words) // 5]
    answer = words[len(words) // 5:]
    script = Script(["<think>", *thinking, "</think>", *answer], tokens_per_second=rate)
    window = open_window(ScriptedEngineDouble([script]), Settings(), history=scratch_history())
    meter = StallMeter()
    finished: list[Any] = []
    window.reply_finished.connect(finished.append)
    window.menus.trigger("restart_engine")
    _wait(loop, window.controls.send_button.isEnabled, 30)
    # A conversation of its own: appended to the last one in the history, the stall measured the
    # re-render of every earlier run's 50,000-token reply (330 ms for 560 KB), not the stream.
    window.menus.trigger("new_conversation")
    # The windows of the benches before it, freed by a full collection that fell mid-stream, measured 45-225 ms
    # of this stream's stall: collected now.
    gc.collect()
    meter.start()
    started = time.perf_counter()
    _send(window, "synthetic")
    _wait(loop, lambda: bool(finished), seconds * 4 + 30)
    elapsed = time.perf_counter() - started
    # Formulas drawn after the stream still reach the window: the stall counts until the last is in place.
    _wait(loop, lambda: not window.chat_view.answer_pane.drawing, 300)
    drawn_after = time.perf_counter() - started - elapsed
    stall = meter.stop()
    # The reasoning splitter drops the whitespace just before </think>.
    reply = window.session.reply
    complete = reply.thinking == "".join(thinking).rstrip() and reply.answer == "".join(answer)
    window.close()
    return {"benchmark": "ui-synthetic-maths" if maths else "ui-synthetic", "rate_tok_s": rate,
            "seconds_planned": seconds, "seconds_taken": round(elapsed, 2), "tokens": len(words),
            "finish_reason": finished[0].reason,
            "longest_ui_stall_ms": round(stall * 1000, 1), "every_character_arrived": complete,
            "formulas_in_place_s_after_the_stream": round(drawn_after, 2)}


def bench_ui_thread(answer_words: int = 500) -> dict[str, Any]:
    """A send in a long conversation: the thread above the live reply gains one reply and one question."""
    from app.core.chat.conversation import Conversation, Turn
    from app.engine.scripted import ScriptedEngineDouble
    from app.ui.app_main import open_window

    app, _ = _qt_app()
    window = open_window(ScriptedEngineDouble(), Settings(), history=scratch_history())  # only its view is timed
    view = window.chat_view
    view.render_thread(Conversation(turns=[Turn("warm-up", answer="x")]))  # fonts load once, not in a figure
    result: dict[str, Any] = {"benchmark": "ui-thread", "answer_words": answer_words}
    for turns in (10, 30, 60):
        conversation = Conversation(turns=[Turn(f"question {n}", answer="".join(synthetic_words(answer_words)),
                                                finish_reason="stop") for n in range(turns)])
        view.start_reply(conversation)  # the conversation as shown before the send
        app.processEvents()
        conversation.add_turn(Turn("the next question"))
        started = time.perf_counter()
        view.start_reply(conversation)
        result[f"send after {turns} turns: ms"] = round((time.perf_counter() - started) * 1000, 1)
    window.close()
    return result


def bench_ui_real(tokens: int, repeats: int = 5) -> dict[str, Any]:
    """Real engine: UI stall while loading, then end-to-end tok/s through the window against raw AsyncLLM.

    Both sides time the whole request (prefill included), for the same prompt and token count:
    the window from the Send click to the finished reply on screen, raw AsyncLLM from the call
    to its last token.
    """
    from app.engine.process.bench_entry import BenchEngineProcess
    from app.ui.app_main import open_window

    app, loop = _qt_app()
    host = BenchEngineProcess()  # the app's local engine, vLLM in a child process, plus raw AsyncLLM runs
    settings = Settings(engine=_model_config(), sampling=SamplingConfig(think_budget=0, max_tokens=tokens))
    window = open_window(host, settings, history=scratch_history())
    meter = StallMeter()
    finished: list[Any] = []
    window.reply_finished.connect(finished.append)
    raw, through_window, parent_cpu, engine_front_cpu = [], [], [], []
    me = psutil.Process()
    meter.start()
    window.menus.trigger("restart_engine")
    _wait(loop, window.controls.send_button.isEnabled, 600)
    load_stall = meter.stop()
    front = psutil.Process(host.pid)  # vLLM's engine client (AsyncLLM and the reply layer), not EngineCore
    for index in range(repeats):
        window.menus.trigger("new_conversation")
        finished.clear()
        prompt = f"{COUNTING} ({index})"
        cpu_before, front_before = sum(me.cpu_times()[:2]), sum(front.cpu_times()[:2])
        sent = time.perf_counter()
        _send(window, prompt)
        _wait(loop, lambda: bool(finished), 600)
        elapsed = time.perf_counter() - sent
        parent_cpu.append((sum(me.cpu_times()[:2]) - cpu_before) / elapsed)
        engine_front_cpu.append((sum(front.cpu_times()[:2]) - front_before) / elapsed)
        produced = finished[0].metrics.answer_tokens
        through_window.append(produced / elapsed)
        messages = [{"role": "user", "content": prompt}]
        raw.append(host.loop_thread.submit(host.measure_raw(produced, index, messages)).result(600))
    window.close()
    raw_median, window_median = statistics.median(raw), statistics.median(through_window)
    return {"benchmark": "ui-real", "max_tokens": tokens, "longest_ui_stall_while_loading_ms":
            round(load_stall * 1000, 1), "raw_asyncllm_tok_s": round(raw_median, 2),
            "through_window_tok_s": round(window_median, 2), "ratio": round(window_median / raw_median, 3),
            "raw_runs": [round(x, 2) for x in raw], "window_runs": [round(x, 2) for x in through_window],
            "app_process_cpu_share_while_streaming": round(statistics.median(parent_cpu), 3),
            "engine_process_cpu_share_while_streaming": round(statistics.median(engine_front_cpu), 3)}


# ---- trimming: a long conversation cut to the context, on the real tokenizer ----------------------

def _conversation(turns: int, chars: int) -> list[dict[str, str]]:
    words = "the sky is blue because air scatters short wavelengths more than long ones".split()
    messages = [{"role": "system", "content": "Be brief."}]
    for index in range(turns):
        text = " ".join(words[(index + k) % len(words)] for k in range(chars // 5 + 1))[:chars]
        messages.append({"role": "user" if index % 2 == 0 else "assistant", "content": text})
    return messages


def bench_trim(context: int = 4096, repeats: int = 5) -> dict[str, Any]:
    """``fit_prompt`` as EngineHost calls it (reserve a quarter of the context) against the old way."""
    from transformers import AutoTokenizer

    from app.core.models.embedded_model import ensure_embedded_model
    from app.engine.reply.trimming import fit_by_dropping_one_at_a_time, fit_prompt

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_embedded_model()))
    reserve = context // 4

    def median_ms(fit: Any, messages: list[dict[str, str]], runs: int) -> tuple[str, int]:
        """Wall and CPU ms: on a shared machine the wall time is mostly waiting for a core."""
        wall, cpu, dropped = [], [], 0
        for _ in range(runs):
            started, started_cpu = time.perf_counter(), time.process_time()
            _, dropped = fit(messages)
            wall.append((time.perf_counter() - started) * 1000)
            cpu.append((time.process_time() - started_cpu) * 1000)
        return f"{statistics.median(wall):.1f} wall, {statistics.median(cpu):.1f} CPU", dropped

    result: dict[str, Any] = {"benchmark": "trim", "context_tokens": context, "reserve_tokens": reserve,
                              "load_average_1min": round(os.getloadavg()[0], 1)}
    fast = lambda m: fit_prompt(tokenizer, m, limit=context, reserve=reserve, opened_think=False)  # noqa: E731
    fast(_conversation(10, 100))  # warm-up: the template compiles once
    for turns, chars in ((1_000, 600), (1_000, 4_500), (30_000, 1)):
        ms, dropped = median_ms(fast, _conversation(turns, chars), repeats)
        result[f"{turns:,} messages x {chars:,} chars: ms"] = f"{ms} ({dropped:,} dropped)"
    old = lambda m: fit_by_dropping_one_at_a_time(tokenizer, m, budget=context - reserve,  # noqa: E731
                                                  opened_think=False)
    for turns, chars in ((60, 2_000),):
        old_ms, _ = median_ms(old, _conversation(turns, chars), 1)
        new_ms, _ = median_ms(fast, _conversation(turns, chars), repeats)
        result[f"{turns} messages x {chars:,} chars: old way ms"] = old_ms
        result[f"{turns} messages x {chars:,} chars: ms"] = new_ms
    return result


# ---- start-up: process start to window shown ---------------------------------------------------

def bench_startup(repeats: int = 3) -> dict[str, Any]:
    outer, inner = startup_seconds(repeats)
    return {"benchmark": "startup", "repeats": repeats, "process_start_to_window_shown_s": outer,
            "from_first_app_line_s": inner}


def startup_seconds(repeats: int = 3, env: dict[str, str] | None = None) -> tuple[float, float]:
    """`nalar` started ``repeats`` times until its window is shown (then it quits): the medians from process
    start, and from the app's first line. ``env``: the environment (another history, for `bench history`)."""
    env = dict(env or os.environ, NALAR_QUIT_AFTER_SHOWN="1")
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    outer, inner = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "app", "--report-startup"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            if "window shown" in line:
                outer.append(time.perf_counter() - started)
                inner.append(float(line.split("shown")[1].split("s")[0]))
                break
        proc.wait(120)
    if not outer:
        raise RuntimeError("nalar never reported its window shown")
    return round(statistics.median(outer), 3), round(statistics.median(inner), 3)


def bench_memory(runs: int = 5) -> dict[str, Any]:
    """Host memory bandwidth (the same copy the FP8 bench's floor uses), ``runs`` times, and the ceiling it
    puts on the CPU catalog's decode speed: bandwidth ÷ bytes read per token at 4k of context."""
    from app.core.models.cpu_catalog import CPU_CATALOG, EXPECTATION_CONTEXT
    from app.core.models.planner import bytes_read_per_token, measure_host_bandwidth_gbps

    gbps = sorted(measure_host_bandwidth_gbps() for _ in range(runs))
    median = statistics.median(gbps)
    ceilings = {}
    for model in CPU_CATALOG:
        for kv in ("fp8_e4m3", "auto"):
            per_token = bytes_read_per_token(model.config(), context_tokens=EXPECTATION_CONTEXT, kv_dtype=kv)
            ceilings[f"{model.label} ({kv}) tok/s ceiling"] = round(median * 1e9 / per_token, 1)
    return {"benchmark": "memory", "copy": "numpy, one thread, 256 MiB, best of 5, read + write counted",
            "runs_gbps": [round(g, 1) for g in gbps], "median_gbps": round(median, 1),
            "load_average": round(os.getloadavg()[0], 1), **ceilings}


def run_ui_benches(tokens: int, *, real: bool = True, seconds: float = 10.0) -> list[dict[str, Any]]:
    """The UI benches on one Qt app and loop, closed (loop first) when they end."""
    try:
        results = [bench_ui_synthetic(seconds=seconds), bench_ui_synthetic(seconds=seconds, maths=True),
                   bench_ui_thread()]
        if real:
            results.append(bench_ui_real(tokens))
        return results
    finally:
        close_ui_loop()


def run_bench(what: str, *, tokens: int, as_json: bool) -> int:
    results: list[dict[str, Any]] = []
    if what in ("startup", "all"):
        results.append(bench_startup())
    if what in ("ui", "all"):
        results += run_ui_benches(tokens)
    if what in ("engine", "all"):
        results.append(bench_engine(tokens))
    if what in ("trim", "all"):
        results.append(bench_trim())
    if what in ("memory", "all"):
        results.append(bench_memory())
    report = {"machine": machine_description(), "when": time.strftime("%Y-%m-%d %H:%M"), "results": results}
    out = save_json(sibling(report_stem("bench", f"bench-{what}"), ".json"), report)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print(f"machine: {report['machine']}")
        for result in results:
            print(f"\n[{result['benchmark']}]")
            for key, value in result.items():
                if key != "benchmark":
                    print(f"  {key:40s} {value}")
        print(f"\nsaved: {out}")
    return 0
