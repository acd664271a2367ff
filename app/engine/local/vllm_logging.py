"""Route vLLM's logs and the engine processes' output (the parent and its EngineCore children) into our log file.

vLLM reports why its EngineCore failed only in that process's log, while the
parent sees "Engine core initialization failed". The children inherit
VLLM_LOGGING_CONFIG_PATH, so pointing it at a config that writes a file lets
us read the root cause back and turn it into a typed error.

The user's terminal shows Nalar's own lines only: vLLM logs to the file alone, and the engine process sends
its stdout and stderr (so its children's: warnings, progress bars, hints printed from C++) there too.

engine.log is shared: benchmarks' engine processes and a dying EngineCore of another Nalar write there
too. So each engine process writes its own logging config, whose lines carry its tag ("nalar=<pid>",
inherited by its EngineCore), and a start reads back only the lines of its own tag.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from app.core.settings import paths

ENGINE_LOG_NAME = "engine.log"
_TAG = re.compile(r"\bnalar=\d+")
MAX_ENGINE_LOG_BYTES = 5 * 1024 * 1024


def engine_log_path() -> Path:
    return paths.log_dir() / ENGINE_LOG_NAME


def start_tag(pid: int | None = None) -> str:
    """The tag on the log lines of an engine process (``pid``, this one by default) and of its children."""
    return f"nalar={pid or os.getpid()}"


def configure_vllm_logging() -> Path:
    """Write this process's logging config and export it. Call before vLLM is imported."""
    log_file = engine_log_path()
    paths.private_dir(log_file.parent)
    # Several processes append to this file, so it is rotated here, between runs.
    if log_file.exists() and log_file.stat().st_size > MAX_ENGINE_LOG_BYTES:
        log_file.replace(log_file.with_suffix(".log.1"))
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": f"%(asctime)s {start_tag()} %(process)d %(levelname)s %(name)s: "
                                           "%(message)s"}},
        "handlers": {
            "file": {"class": "logging.FileHandler", "formatter": "plain", "level": "INFO",
                     "filename": str(log_file), "mode": "a", "encoding": "utf-8"},
        },
        # FlashInfer logs its kernel builds ("Building JIT module") under its own name.
        "loggers": {"vllm": {"handlers": ["file"], "level": "INFO", "propagate": False},
                    "flashinfer": {"handlers": ["file"], "level": "INFO", "propagate": False}},
    }
    config_path = log_file.parent / f"vllm-logging-{os.getpid()}.json"  # per process: the tag is in it
    config_path.write_text(json.dumps(config, indent=2))
    atexit.register(_remove, config_path)
    os.close(_open_engine_log())  # created here, 0600, before vLLM's handler opens it
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = str(config_path)
    return log_file


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def read_log_since(log_file: Path, offset: int, tag: str | None = None) -> str:
    """What this engine process and its children logged after ``offset`` (the file size before a start).
    Lines of another tag (another engine process's) are left out, with the untagged lines that follow them
    (their tracebacks); untagged lines after ours (our tracebacks, our children's raw output) are kept."""
    try:
        with log_file.open("rb") as handle:
            handle.seek(offset)
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    ours, keeping = (tag or start_tag()) + " ", True
    kept = []
    for line in text.splitlines(keepends=True):
        if match := _TAG.search(line[:80]):
            keeping = match.group(0) + " " == ours
        if keeping:
            kept.append(line)
    return "".join(kept)


def log_size(log_file: Path) -> int:
    try:
        return log_file.stat().st_size
    except OSError:
        return 0


def _open_engine_log() -> int:
    log_file = engine_log_path()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, paths.PRIVATE_FILE)
    os.fchmod(fd, paths.PRIVATE_FILE)  # a file from before 0600 too
    return fd


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
