"""The demo MCP server (tests/support/mcp_demo_server.py) over streamable HTTP, as a real child process."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from tests.support import MCP_DEMO_SERVER
from tests.support.vllm_server import free_port


@contextlib.contextmanager
def http_demo_server() -> Iterator[int]:
    """The server on 127.0.0.1; yields its port once it listens, kills it on exit."""
    port = free_port()
    server = subprocess.Popen([sys.executable, MCP_DEMO_SERVER, "http", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None, "the HTTP demo server exited"
            time.sleep(0.2)  # ok-sleep: polling a port of a process we started
        yield port
    finally:
        server.kill()
        server.wait(10)
