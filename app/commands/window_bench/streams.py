"""`nalar bench ui`: a synthetic 5,000 tok/s stream (plain and with maths), a send in a long thread, and the real
engine through the window against raw AsyncLLM; each in a window of the app's own start-up."""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

import psutil

from app.commands.bench_maths import synthetic_maths, synthetic_words
from app.commands.window_bench.harness import (
    StallMeter,
    bench_window,
    close_ui_loop,
    embedded_engine_config,
    qt_app,
    scratch_history,
    send,
    wait,
)
from app.core.settings.settings import SamplingConfig, Settings

# Long, steady output (so runs rarely stop early at EOS and compare like for like).
COUNTING = "Count from 1 to 400, separated by commas."


def bench_ui_synthetic(rate: int = 5000, seconds: float = 10.0, maths: bool = False) -> dict[str, Any]:
    """``maths``: the answer carries formulas (``synthetic_maths``), which the answer pane draws as they close."""
    from app.engine.scripted import Script, ScriptedEngineDouble

    words = (synthetic_maths if maths else synthetic_words)(int(rate * seconds))
    thinking = words[: len(words) // 5]
    answer = words[len(words) // 5:]
    script = Script(["<think>", *thinking, "</think>", *answer], tokens_per_second=rate)
    window, loop = bench_window(ScriptedEngineDouble([script]), Settings(), history=scratch_history())
    meter = StallMeter()
    finished: list[Any] = []
    window.reply_finished.connect(finished.append)
    window.menus.trigger("restart_engine")
    wait(loop, window.controls.send_button.isEnabled, 30)
    # A conversation of its own: appended to the last one in the history, the stall measured the
    # re-render of every earlier run's 50,000-token reply (330 ms for 560 KB), not the stream.
    window.menus.trigger("new_conversation")
    # The windows of the benches before it, freed by a full collection that fell mid-stream, measured 45-225 ms
    # of this stream's stall: collected now.
    gc.collect()
    meter.start()
    started = time.perf_counter()
    send(window, "synthetic")
    wait(loop, lambda: bool(finished), seconds * 4 + 30)
    elapsed = time.perf_counter() - started
    # Formulas drawn after the stream still reach the window: the stall counts until the last is in place.
    wait(loop, lambda: not window.chat_view.answer_pane.drawing, 300)
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

    app, _ = qt_app()
    window, _ = bench_window(ScriptedEngineDouble(), Settings(), history=scratch_history())  # only its view is timed
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

    host = BenchEngineProcess()  # the app's local engine, vLLM in a child process, plus raw AsyncLLM runs
    settings = Settings(engine=embedded_engine_config(), sampling=SamplingConfig(think_budget=0, max_tokens=tokens))
    window, loop = bench_window(host, settings, history=scratch_history())
    meter = StallMeter()
    finished: list[Any] = []
    window.reply_finished.connect(finished.append)
    raw, through_window, parent_cpu, engine_front_cpu = [], [], [], []
    me = psutil.Process()
    meter.start()
    window.menus.trigger("restart_engine")
    wait(loop, window.controls.send_button.isEnabled, 600)
    load_stall = meter.stop()
    front = psutil.Process(host.pid)  # vLLM's engine client (AsyncLLM and the reply layer), not EngineCore
    for index in range(repeats):
        window.menus.trigger("new_conversation")
        finished.clear()
        prompt = f"{COUNTING} ({index})"
        cpu_before, front_before = sum(me.cpu_times()[:2]), sum(front.cpu_times()[:2])
        sent = time.perf_counter()
        send(window, prompt)
        wait(loop, lambda: bool(finished), 600)
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
