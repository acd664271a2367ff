"""A small MCP server for the tool tests, built with the SDK's MCPServer (v1's FastMCP): run over stdio.

    python tests/support/mcp_demo_server.py            (stdio)
    python tests/support/mcp_demo_server.py http PORT  (streamable HTTP on 127.0.0.1)
"""

from __future__ import annotations

import sys

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("nalar-demo")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers and return the sum."""
    return a + b


@server.tool()
async def slow(seconds: float = 600) -> str:
    """Wait this many seconds, then say done (tests use it to exceed the call timeout)."""
    await anyio.sleep(seconds)
    return "done"


@server.tool()
def fails(reason: str = "broken on purpose") -> str:
    """Always fails with the given reason."""
    raise ValueError(reason)


@server.tool()
def markup() -> str:
    """Returns text that looks like HTML and a script: a view must show it as text."""
    return "<b>bold?</b><script>alert(1)</script><img src=x onerror=alert(2)>"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
