"""Failures driven for real: bad model paths, no memory at load, EngineCore killed, window closed
mid-reply, and the whole app SIGKILLed mid-answer (history kept, orphaned engine ended next start). Closing while
the engine loads is tests/real/test_shutdown_real.py's close at "weights", through the real app."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from app.core.chat.history import HistoryStore, history_path
from app.core.settings import paths
from app.core.settings.settings import EngineConfig, SamplingConfig, Settings, changed, load_settings, save_settings
from app.engine.local.host import EngineHost
from app.engine.machine.orphans import owner_tag, records_dir, same_process
from tests.conftest import child_pids, end_processes, process_family, require_embedded_model, vllm_processes, x_server
from tests.real.test_shutdown_real import chatter


@pytest.mark.parametrize("kind", ["missing", "not a model", "broken config"])
def test_bad_model_path_is_named_and_the_app_stays_usable(qtbot, make_window, tmp_path, kind: str) -> None:
    folder = tmp_path / "my-model"
    if kind != "missing":
        folder.mkdir()
    if kind == "broken config":
        (folder / "config.json").write_text('{"model_type": "llama",')
    window = make_window(EngineHost(), Settings(engine=EngineConfig(model=str(folder))))
    qtbot.waitUntil(window.banner.isVisible, timeout=30_000)
    assert str(folder) in window.banner.text()
    assert {"missing": "does not exist", "not a model": "no config.json",
            "broken config": "is broken"}[kind] in window.banner.text()
    assert not window.controls.send_button.isEnabled()
    window.conversation_list.new_button.click()  # still usable
    assert window.conversation_list.count() == 2
    dialog = window.dialogs.open_settings()
    assert "not a model folder" in dialog.errors[("engine", "model")].text() or kind == "broken config"
    dialog.reject()


def engine_core(before: set[int]) -> psutil.Process:
    cores = [p for p in psutil.Process().children(recursive=True)
             if p.pid not in before and p.name() == "VLLM::EngineCore"]
    assert len(cores) == 1, cores
    return cores[0]


def still_alive(processes: list[tuple[int, float]], timeout: float = 15) -> list[int]:
    """Which of these (pid, start time) processes still run after ``timeout``. A reused pid doesn't count,
    nor does a zombie: an orphan's parent is PID 1, which may never reap it here."""
    def running() -> list[int]:
        alive = []
        for pid, created in processes:
            with contextlib.suppress(psutil.Error):
                if (proc := same_process(pid, created)) and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
        return alive

    deadline = time.monotonic() + timeout
    while (alive := running()) and time.monotonic() < deadline:
        time.sleep(0.1)  # ok-sleep: polling processes that aren't ours to wait on
    return alive


@pytest.mark.real_engine
def test_no_memory_retry_engine_killed_restart_and_close_mid_reply(qtbot, make_window, monkeypatch) -> None:
    settings = Settings(engine=EngineConfig(model=str(require_embedded_model()), cpu_kv_cache_gib=0.125,
                                            max_model_len=8192),
                        sampling=SamplingConfig(think_budget=300, max_tokens=300))
    before = child_pids()
    window = make_window(EngineHost(), settings)

    # 1. The KV pool can't hold one 8,192-token sequence: a typed error with a one-click fix.
    qtbot.waitUntil(window.banner.isVisible, timeout=300_000)
    assert "Not enough memory" in window.banner.text() and "Lower the context length" in window.banner.text()
    action = re.fullmatch(r"Retry with max_model_len = (\d+)", window.banner.action.text())
    assert action, window.banner.action.text()
    smaller = int(action[1])  # vLLM's own estimate of what fits, in 256-token steps
    assert 256 <= smaller < 8192 and smaller % 256 == 0
    window.banner.action.click()
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=300_000)
    assert window.controller.settings.engine.max_model_len == smaller
    assert load_settings()[0].engine.max_model_len == smaller, "the fix that worked is saved"

    # 2. EngineCore killed mid-reply: the UI says so, keeps the partial reply, and restarts.
    secret = "zebra-cobalt-7319"
    monkeypatch.setenv("NALAR_IGNORE_EOS", "1")  # mid-reply steps: still streaming when the test acts
    window.send(f"Tell me a story about {secret}.")
    qtbot.waitUntil(lambda: window.session.streaming and len(window.chat_view.thinking_pane.text()) > 10,
                    timeout=60_000)
    engine_core(before).kill()
    with qtbot.waitSignal(window.reply_finished, timeout=60_000) as blocker:
        pass
    assert blocker.args[0].reason == "error"
    assert "stopped unexpectedly" in window.banner.text() and window.banner.action.text() == "Restart engine"
    partial = window.session.conversation.turns[-1].thinking
    assert partial and partial == window.chat_view.thinking_pane.text()
    window.banner.action.click()
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=300_000)
    monkeypatch.delenv("NALAR_IGNORE_EOS")
    long_replies = window.controller.settings
    # A short reply shows the restarted engine answers (a sampling change restarts nothing); 300 + 300 tokens
    # only made the step longer on a loaded machine.
    window.controller.apply_settings(changed(long_replies, sampling=SamplingConfig(think_budget=16, max_tokens=16)))
    with qtbot.waitSignal(window.reply_finished, timeout=120_000) as blocker:
        window.send("What is 2+2?")
    assert blocker.args[0].reason in ("stop", "length") and window.chat_view.answer_pane.text()
    window.controller.apply_settings(long_replies)  # the next reply must still stream when the window closes

    # 3. Closed mid-reply: abort plus shutdown within 10 s, nothing left behind.
    monkeypatch.setenv("NALAR_IGNORE_EOS", "1")
    window.send("Write a long poem.")
    qtbot.waitUntil(lambda: window.session.streaming and window.chat_view.thinking_pane.text() != "", timeout=60_000)
    started = time.monotonic()
    window.close()
    assert time.monotonic() - started < 10
    assert vllm_processes(before) == []
    turn = HistoryStore().conversations()[-1].turns[-1]
    assert turn.finish_reason == "abort" and turn.user == "Write a long poem."

    # Prompts stay out of the logs.
    engine_log = window.controller.bridge.engine.engine_log.read_text()
    assert secret not in engine_log


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}; the app printed:\n{app_output()}")
        time.sleep(0.2)  # ok-sleep: polling another process's files; no signal crosses processes


@pytest.fixture
def xvfb_display(tmp_path: Path) -> Iterator[str]:
    if not (shutil.which("Xvfb") and shutil.which("xdotool")):
        if os.environ.get("CI"):
            pytest.fail("CI must install xvfb and xdotool (make test does: packaging/linux/system_packages.sh)")
        pytest.skip("needs Xvfb and xdotool (apt install xvfb xdotool)")
    with x_server(tmp_path / "xvfb.log") as display:
        yield display


def launch_app(display: str, output: str = "app-output.log", **extra_env: str) -> subprocess.Popen:
    """The real app, its terminal output in ``output`` (beside the logs)."""
    env = dict(os.environ, DISPLAY=display, QT_QPA_PLATFORM="xcb", **extra_env)
    sink = (paths.log_dir().parent / output).open("ab")
    return subprocess.Popen([sys.executable, "-m", "app"], env=env, stdout=sink, stderr=subprocess.STDOUT)


def app_output() -> str:
    path = paths.log_dir().parent / "app-output.log"
    return path.read_bytes().decode("utf-8", "replace")[-3000:] if path.exists() else "(nothing)"


def ready_count() -> int:
    log_file = paths.log_dir() / "nalar.log"
    return log_file.read_text().count("engine ready:") if log_file.exists() else 0


def reply_row() -> dict:
    if not history_path().exists():
        return {}
    with sqlite3.connect(history_path()) as db:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM messages ORDER BY id DESC LIMIT 1").fetchone()
    return dict(row) if row else {}


@pytest.mark.real_engine
def test_sigkill_mid_reply_on_a_second_branch_keeps_the_partial_and_the_next_start_ends_orphans(
        xvfb_display: str) -> None:
    """A chat with one finished reply; Regenerate (Ctrl+R, from the actions table) streams a second try, and
    the app is SIGKILLed mid-reply and started again before its parent reaps it (it stays a zombie, as under a
    launcher or a PID 1 that doesn't reap). Bugs caught: the partial reply lost, written over the first reply
    (Regenerate used to reset the same row) or saved under the wrong parent; the next start showing the first
    branch instead of the cut-off one, or not marking it interrupted; a zombie owner counted as alive, so the
    dead run's EngineCore keeps running (and, on a GPU, its VRAM); the prompt in the logs. (One scenario, not
    two: each app start costs three vLLM imports; a first reply cut off is the same write as a second try's.)"""
    paths.log_dir().mkdir(parents=True, exist_ok=True)
    # ignore_eos and long limits: the reply must still be streaming when the kill comes, however fast
    # this machine decodes (4,000 tokens is over a minute at 50 tok/s).
    save_settings(Settings(engine=EngineConfig(model=str(require_embedded_model()), max_model_len=8192),
                           sampling=SamplingConfig(think_budget=2000, max_tokens=2000)))
    from app.core.chat.conversation import Conversation, Turn

    store = HistoryStore()
    conversation = Conversation(title="Sky")
    first = conversation.add_turn(Turn(user="Why is the sky blue?"))
    store.start_turn(conversation, first)
    first.answer, first.thinking, first.finish_reason = "Rayleigh scattering.", "light scatters", "stop"
    store.finish_turn(first)
    store.close()
    started: list[tuple[int, float]] = []  # every process either app started: ended in `finally` whatever fails
    app = launch_app(xvfb_display, NALAR_IGNORE_EOS="1")
    second: subprocess.Popen | None = None
    try:
        _wait_for(lambda: ready_count() == 1, 600, "the engine to load")  # a limit, not a speed claim
        env = dict(os.environ, DISPLAY=xvfb_display)
        window_id = subprocess.run(["xdotool", "search", "--sync", "--onlyvisible", "--name", "^Nalar$"], env=env,
                                   capture_output=True, text=True, timeout=30).stdout.split()[0]
        subprocess.run(["xdotool", "windowfocus", "--sync", window_id], env=env, check=True, timeout=30)
        subprocess.run(["xdotool", "key", "ctrl+r"], env=env, check=True, timeout=30)
        _wait_for(lambda: reply_row().get("id") != first.message_id and len(reply_row().get("thinking_text", "")) > 20,
                  120, "the second try's partial text in the database")
        engine = [(p.pid, p.create_time()) for p in psutil.Process(app.pid).children(recursive=True)]
        started += engine
        assert "VLLM::EngineCore" in [psutil.Process(pid).name() for pid, _ in engine]
        record = records_dir() / (owner_tag(psutil.Process(app.pid)).replace(":", "-") + ".json")
        assert record.exists(), "the app recorded its engine processes"
        app.send_signal(signal.SIGKILL)  # not reaped until the end: the app stays a zombie meanwhile
        _wait_for(lambda: psutil.Process(app.pid).status() == psutil.STATUS_ZOMBIE, 10, "the app to die")
        partial = reply_row()
        assert partial["finish_reason"] is None and partial["parent_id"] is None  # a sibling of the first try
        assert partial["user_text"] == "Why is the sky blue?"

        # vLLM may leave EngineCore running (vllm#55510); the next start must end whatever is left.
        survivors = still_alive(engine, timeout=3)
        second = launch_app(xvfb_display, "second-output.log")  # its own terminal: the first's orphans may write
        _wait_for(lambda: ready_count() == 2, 600, "the second start")
        assert still_alive(engine, timeout=5) == [], f"orphans survived the next start (had {survivors})"
        assert not record.exists()
        reopened = HistoryStore(owner=False)
        [loaded] = reopened.conversations()
        reopened.close()
        [kept, cut] = loaded.tree
        assert (kept.answer, kept.finish_reason) == ("Rayleigh scattering.", "stop")
        assert cut.message_id == partial["id"] and cut.finish_reason == "interrupted"
        assert cut.thinking.startswith(partial["thinking_text"][:20]) and loaded.turns == [cut]
        assert loaded.siblings(0) == (1, 2)
        second_engine = [(p.pid, p.create_time()) for p in psutil.Process(second.pid).children(recursive=True)]
        started += second_engine
        second.send_signal(signal.SIGTERM)  # closes like the window's close button
        assert second.wait(30) == 0
        assert still_alive(second_engine) == []
        app_log = (paths.log_dir() / "nalar.log").read_text()
        assert re.search(r"window closed; engine shut down in \d+\.\d s", app_log)
        second_output = (paths.log_dir().parent / "second-output.log").read_text(errors="replace")
        assert chatter(second_output) == [], "a ready app's terminal shows library chatter or a traceback at its close"
        engine_log = (paths.log_dir() / "engine.log").read_text()
        assert "Why is the sky blue" not in app_log + engine_log, "prompts stay out of the logs"
    finally:
        for launched in (app, second):
            if launched is not None:
                started += process_family(launched.pid)
        left = end_processes(started)
        for launched in (app, second):
            if launched is not None:
                launched.wait(30)  # reap: it was left a zombie on purpose
        assert left == [], f"could not end {left}"
