"""Profiles, keys in the keyring (never in files or logs), the backend factory, the API server from the
settings, tensor_parallel_size offered only with several GPUs, and the history migration."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import keyring
import keyring.backend
import keyring.backends.fail
import pytest
from keyring.errors import PasswordDeleteError
from openai import OpenAI
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QDialogButtonBox

from app.core.chat import history
from app.core.chat.history import HistoryStore, history_path
from app.core.settings import paths
from app.core.settings.keystore import API_SERVER_TOKEN, SERVICE, KeyStore, profile_entry
from app.core.settings.settings import (
    ApiServerConfig,
    BackendsConfig,
    EndpointProfile,
    EngineConfig,
    Settings,
    load_settings,
    settings_path,
)
from app.engine.backends import build_engine
from app.engine.machine.capability import GpuInfo, HardwareProbe
from app.engine.process.engine_process import EngineProcess
from app.engine.remote.failover import FailoverEngine
from app.engine.remote.remote import RemoteEngine
from app.engine.scripted import Script, ScriptedEngineDouble
from app.ui.dialogs.settings_dialog import SettingsDialog
from tests.support.vllm_server import closed_port, free_port

SECRET = "sk-live-7c1e9a-do-not-leak"
CPU = HardwareProbe("cpu", "0.32.0", frozenset({"avx512f", "amx_tile"}))


class MemoryKeyring(keyring.backend.KeyringBackend):
    """A real keyring backend that keeps passwords in a dict, installed with keyring.set_keyring."""

    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.passwords: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.passwords.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.passwords[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        if self.passwords.pop((service, username), None) is None:
            raise PasswordDeleteError(username)


@pytest.fixture
def memory_keyring() -> Iterator[MemoryKeyring]:
    previous = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(previous)


@pytest.fixture
def no_keyring() -> Iterator[None]:
    previous = keyring.get_keyring()
    keyring.set_keyring(keyring.backends.fail.Keyring())
    yield
    keyring.set_keyring(previous)


def everything_written(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())


def test_a_key_goes_to_the_keyring_and_survives_a_new_store(memory_keyring: MemoryKeyring) -> None:
    assert KeyStore().set(profile_entry("gpu-box"), SECRET) is True
    assert memory_keyring.passwords[(SERVICE, "profile:gpu-box")] == SECRET
    assert KeyStore().get(profile_entry("gpu-box")) == SECRET
    token = KeyStore().api_server_token()
    assert token.startswith("nalar-") and len(token) > 40 and KeyStore().api_server_token() == token
    assert memory_keyring.passwords[(SERVICE, API_SERVER_TOKEN)] == token


def test_without_a_keyring_keys_stay_in_memory_and_the_user_is_told(no_keyring, isolated_dirs: Path) -> None:
    keys = KeyStore()
    assert keys.set(profile_entry("gpu-box"), SECRET) is False
    assert keys.get(profile_entry("gpu-box")) == SECRET, "usable for this session"
    assert keys.notice is not None and "in memory for this session only" in keys.notice
    assert KeyStore().get(profile_entry("gpu-box")) is None, "gone with the session"
    assert SECRET not in everything_written(isolated_dirs), "no plaintext fallback"


def open_dialog(qtbot, settings: Settings, keys: KeyStore, probe: HardwareProbe = CPU) -> SettingsDialog:
    dialog = SettingsDialog(settings, probe, keys=keys)
    qtbot.addWidget(dialog)
    return dialog


def test_a_remote_profile_added_in_settings_keeps_its_key_out_of_the_file(
        qtbot, make_window, memory_keyring: MemoryKeyring, isolated_dirs: Path, caplog) -> None:
    caplog.set_level(logging.DEBUG)  # the openai and httpx loggers too, at their most talkative
    window = make_window(ScriptedEngineDouble())
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=10_000)
    dialog = window.dialogs.open_settings()
    panel = dialog.backends_panel
    panel.add_button.click()
    url = f"http://127.0.0.1:{closed_port()}/v1"
    for edit, text in ((panel.name_edit, "gpu-box"), (panel.url_edit, url), (panel.model_edit, "big-model")):
        edit.setText("")
        qtbot.keyClicks(edit, text)
    qtbot.keyClicks(panel.key_edit, SECRET)
    panel.active_combo.setCurrentIndex(panel.active_combo.findData("gpu-box"))
    assert dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).isEnabled(), dialog.form_error.text()
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()

    saved = load_settings()[0].backends
    assert saved.active == "gpu-box" and saved.profile("gpu-box") == EndpointProfile(
        name="gpu-box", base_url=url, model="big-model")
    assert memory_keyring.passwords[(SERVICE, "profile:gpu-box")] == SECRET
    # The window switched to the remote backend; nothing listens there, and it says so by URL.
    qtbot.waitUntil(window.banner.isVisible, timeout=30_000)
    assert f"Can't reach {url} (profile “gpu-box”)." in window.banner.text()
    engine = window.controller.bridge.engine
    assert isinstance(engine, RemoteEngine) and engine._api_key == SECRET
    window.close()
    assert SECRET not in settings_path().read_text()
    assert SECRET not in everything_written(isolated_dirs), "not in settings, history or log files"
    assert "Sending HTTP Request" in caplog.text, "the openai client did log its request"
    assert SECRET not in caplog.text


def test_a_bad_profile_url_blocks_apply_with_a_reason(qtbot, memory_keyring) -> None:
    dialog = open_dialog(qtbot, Settings(), KeyStore())
    dialog.backends_panel.add_button.click()
    dialog.backends_panel.url_edit.setText("")
    qtbot.keyClicks(dialog.backends_panel.url_edit, "gpu-box:8000")
    assert not dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).isEnabled()
    assert "Backends: profile" in dialog.form_error.text() and "base_url" in dialog.form_error.text()


def test_the_keyring_notice_shows_when_there_is_none(qtbot, no_keyring) -> None:
    settings = Settings(backends=BackendsConfig(profiles=(EndpointProfile(name="a", base_url="http://h:1/v1"),)))
    dialog = open_dialog(qtbot, settings, KeyStore())
    dialog.show()
    dialog.tabs.setCurrentIndex(dialog.tabs.indexOf(dialog.backends_panel.parentWidget()))
    assert dialog.backends_panel.key_notice.isVisible()
    assert "memory for this session only" in dialog.backends_panel.key_notice.text()
    dialog.close()


def test_the_api_server_from_settings_answers_with_its_token_and_shows_url_and_token(
        qtbot, make_window, memory_keyring, isolated_dirs: Path) -> None:
    engine = ScriptedEngineDouble([Script(["<think>scripted thought</think>", "scripted answer"])])
    window = make_window(engine)
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=10_000)
    assert window.controller.api_server is None, "off by default"
    port = free_port()
    dialog = window.dialogs.open_settings()
    panel = dialog.api_server_panel
    panel.enabled.setChecked(True)
    panel.port.setValue(port)
    assert panel.url_label.text() == f"http://127.0.0.1:{port}/v1"
    token = panel.token_edit.text()
    assert token == KeyStore().api_server_token()
    panel.copy_button.click()
    assert QGuiApplication.clipboard().text() == token
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    qtbot.waitUntil(lambda: window.controller.api_server is not None, timeout=10_000)
    assert window.status_bar.api_label.text() == f"API: http://127.0.0.1:{port}/v1"
    assert load_settings()[0].api_server == ApiServerConfig(enabled=True, port=port)

    reply = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=token, max_retries=0).chat.completions.create(
        model="scripted-double", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "scripted answer"
    assert (reply.choices[0].message.model_extra or {})["reasoning_content"] == "scripted thought"
    window.close()
    assert token not in everything_written(isolated_dirs)


def test_tensor_parallel_is_offered_only_with_more_than_one_gpu(qtbot, memory_keyring) -> None:
    def gpu(index: int) -> GpuInfo:
        return GpuInfo(index, "NVIDIA L4", (8, 9), 24 << 30, 23 << 30)

    one = open_dialog(qtbot, Settings(), KeyStore(), HardwareProbe("cuda", "0.33.0", gpus=(gpu(0),)))
    assert not one.editors[("engine", "tensor_parallel_size")].isEnabled()
    assert "needs more than one NVIDIA GPU (this machine has 1)" in one.reasons.text()
    cpu = open_dialog(qtbot, Settings(), KeyStore())
    assert not cpu.editors[("engine", "tensor_parallel_size")].isEnabled()
    two = open_dialog(qtbot, Settings(), KeyStore(), HardwareProbe("cuda", "0.33.0", gpus=(gpu(0), gpu(1))))
    editor = two.editors[("engine", "tensor_parallel_size")]
    assert editor.isEnabled()
    editor.setValue(2)
    assert two.candidate is not None and two.candidate.engine.tensor_parallel_size == 2


def test_the_factory_builds_what_the_backend_settings_say(memory_keyring) -> None:
    keys = KeyStore()
    keys.set(profile_entry("gpu-box"), SECRET)
    gpu_box = EndpointProfile(name="gpu-box", base_url="http://gpu-box:8000/v1", model="m")
    spare = EndpointProfile(name="spare", base_url="http://spare:8000/v1")
    cases = {
        "local only": (BackendsConfig(profiles=(gpu_box,)), EngineProcess, None),
        "remote only": (BackendsConfig(profiles=(gpu_box,), active="gpu-box"), RemoteEngine, None),
        "local, remote fallback": (BackendsConfig(profiles=(gpu_box,), fallback="gpu-box"), EngineProcess,
                                   RemoteEngine),
        "remote, local fallback": (BackendsConfig(profiles=(gpu_box, spare), active="gpu-box", fallback="spare",
                                                  fallback_to_local=True, first_token_budget_s=2), RemoteEngine,
                                   EngineProcess),
        "remote, remote fallback": (BackendsConfig(profiles=(gpu_box, spare), active="gpu-box", fallback="spare"),
                                    RemoteEngine, RemoteEngine),
    }
    for name, (backends, primary_type, fallback_type) in cases.items():
        engine = build_engine(backends, keys)
        try:
            if fallback_type is None:
                assert type(engine) is primary_type, name
                continue
            assert isinstance(engine, FailoverEngine), name
            assert type(engine.primary) is primary_type and type(engine.fallback) is fallback_type, name
            assert engine.first_token_budget_s == backends.first_token_budget_s
            remote = engine.primary if isinstance(engine.primary, RemoteEngine) else engine.fallback
            assert isinstance(remote, RemoteEngine)
            if remote.profile.name == "gpu-box":
                assert remote._api_key == SECRET and SECRET not in repr(remote)
        finally:
            engine.close()


def test_a_version_1_history_gains_the_backend_column(isolated_dirs: Path) -> None:
    path = history_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:  # the schema as it was before backends existed
        db.executescript("""
            CREATE TABLE conversations (id TEXT PRIMARY KEY, title TEXT NOT NULL, created_at REAL NOT NULL,
                                        updated_at REAL NOT NULL);
            CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id TEXT NOT NULL
                REFERENCES conversations(id) ON DELETE CASCADE, position INTEGER NOT NULL, user_text TEXT NOT NULL,
                thinking_text TEXT NOT NULL DEFAULT '', answer_text TEXT NOT NULL DEFAULT '',
                model TEXT NOT NULL DEFAULT '', kv_cache_dtype TEXT NOT NULL DEFAULT '',
                thinking_tokens INTEGER NOT NULL DEFAULT 0, answer_tokens INTEGER NOT NULL DEFAULT 0, ttft_s REAL,
                tok_s REAL NOT NULL DEFAULT 0, finish_reason TEXT, created_at REAL NOT NULL,
                updated_at REAL NOT NULL, UNIQUE (conversation_id, position));
            PRAGMA user_version = 1;
            INSERT INTO conversations VALUES ('c1', 'Old chat', 1, 1);
            INSERT INTO messages (conversation_id, position, user_text, answer_text, finish_reason, created_at,
                                  updated_at) VALUES ('c1', 0, 'hello', 'hi there', 'stop', 1, 1);
        """)
    store = HistoryStore()
    (conversation,) = store.conversations()
    assert conversation.turns[0].answer == "hi there" and conversation.turns[0].backend == ""
    turn = conversation.turns[0]
    turn.backend = "gpu-box"
    store.finish_turn(turn)
    assert store.message_row(turn.message_id)["backend"] == "gpu-box"
    assert store.message_row(turn.message_id)["loop_guard"] == ""  # version 4 added the loop guard's record
    store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == history.SCHEMA_VERSION
    HistoryStore().close()  # opening a current file again changes nothing
    assert paths.data_dir() in path.parents


def test_settings_without_backend_sections_still_load(isolated_dirs: Path) -> None:
    settings_path().parent.mkdir(parents=True, exist_ok=True)
    settings_path().write_text('{"schema_version": 1, "engine": {"max_model_len": 2048}}')
    settings, notice = load_settings()
    assert notice is None and settings.backends == BackendsConfig() and not settings.api_server.enabled
    assert settings.engine == EngineConfig(max_model_len=2048)


def test_a_new_key_alone_rebuilds_the_engine_and_renames_and_removals_follow_the_keyring(
        qtbot, make_window, memory_keyring: MemoryKeyring) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    profile = EndpointProfile(name="gpu-box", base_url=url)
    keys = KeyStore()
    keys.set(profile_entry("gpu-box"), "sk-old")
    settings = Settings(backends=BackendsConfig(profiles=(profile,), active="gpu-box"))
    window = make_window(build_engine(settings.backends, keys), settings, start=False, keys=keys)
    assert window.controller.bridge.engine._api_key == "sk-old"

    dialog = window.dialogs.open_settings()
    qtbot.keyClicks(dialog.backends_panel.key_edit, SECRET)
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    qtbot.waitUntil(lambda: getattr(window.controller.bridge.engine, "_api_key", None) == SECRET, timeout=10_000)
    qtbot.waitUntil(window.banner.isVisible, timeout=10_000)  # the new engine tried its closed port

    dialog = window.dialogs.open_settings()
    panel = dialog.backends_panel
    panel.name_edit.setText("")
    qtbot.keyClicks(panel.name_edit, "big-box")
    panel.add_button.click()
    panel.remove_button.click()  # removes the new, unsaved one
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    assert memory_keyring.passwords == {(SERVICE, "profile:big-box"): SECRET}
    qtbot.waitUntil(lambda: getattr(window.controller.bridge.engine, "backend_name", "") == "big-box", timeout=10_000)
    qtbot.waitUntil(lambda: "profile “big-box”" in window.banner.text(), timeout=10_000)

    dialog = window.dialogs.open_settings()
    panel = dialog.backends_panel
    panel.add_button.click()  # "remote-1", on the same closed port
    panel.url_edit.setText("")
    qtbot.keyClicks(panel.url_edit, url)
    panel.active_combo.setCurrentIndex(panel.active_combo.findData("remote-1"))
    panel.list.setCurrentRow(0)
    panel.remove_button.click()  # big-box
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    assert memory_keyring.passwords == {}, "a removed profile's key leaves the keyring"
    assert [p.name for p in load_settings()[0].backends.profiles] == ["remote-1"]
    qtbot.waitUntil(lambda: getattr(window.controller.bridge.engine, "backend_name", "") == "remote-1", timeout=10_000)
    qtbot.waitUntil(lambda: "profile “remote-1”" in window.banner.text(), timeout=10_000)  # its start is over
