"""Route vLLM's logs and the engine processes' output (the parent and its EngineCore children) into our log file.

vLLM reports why its EngineCore failed only in that process's log, while the
parent sees "Engine core initialization failed". The children inherit
VLLM_LOGGING_CONFIG_PATH, so pointing it at a config that writes a file lets
us read the root cause back and turn it into a typed error.

The user's terminal shows Nalar's own lines only: vLLM logs to the file alone, and the engine process sends
its stdout and stderr (so its children's: warnings, progress bars, hints printed from C++) there too.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from app.core.settings import paths

ENGINE_LOG_NAME = "engine.log"
MAX_ENGINE_LOG_BYTES = 5 * 1024 * 1024


def engine_log_path() -> Path:
    return paths.log_dir() / ENGINE_LOG_NAME


def configure_vllm_logging() -> Path:
    """Write the logging config and export it. Call before vLLM is imported."""
    log_file = engine_log_path()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    # Several processes append to this file, so it is rotated here, between runs.
    if log_file.exists() and log_file.stat().st_size > MAX_ENGINE_LOG_BYTES:
        log_file.replace(log_file.with_suffix(".log.1"))
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"}},
        "handlers": {
            "file": {"class": "logging.FileHandler", "formatter": "plain", "level": "INFO",
                     "filename": str(log_file), "mode": "a", "encoding": "utf-8"},
        },
        # FlashInfer logs its kernel builds ("Building JIT module") under its own name.
        "loggers": {"vllm": {"handlers": ["file"], "level": "INFO", "propagate": False},
                    "flashinfer": {"handlers": ["file"], "level": "INFO", "propagate": False}},
    }
    config_path = log_file.parent / "vllm-logging.json"
    config_path.write_text(json.dumps(config, indent=2))
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = str(config_path)
    return log_file


def read_log_since(log_file: Path, offset: int) -> str:
    """What the engine processes logged after ``offset`` (the file size before a start)."""
    try:
        with log_file.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def log_size(log_file: Path) -> int:
    try:
        return log_file.stat().st_size
    except OSError:
        return 0


def _open_engine_log() -> int:
    log_file = engine_log_path()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    return os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def send_output_to_engine_log() -> None:
    """This process's stdout and stderr, and so every child's it starts from now on, append to the engine log."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = _open_engine_log()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


@contextlib.contextmanager
def stderr_to_engine_log() -> Iterator[None]:
    """For a moment, this process's stderr goes to the engine log: a helper started meanwhile keeps it
    (multiprocessing's resource tracker, whose leak reports about the engine's shared memory are chatter)."""
    sys.stderr.flush()
    saved, fd = os.dup(2), _open_engine_log()
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
