"""McpToolbox: connections to the user's MCP servers on one asyncio loop thread, with typed results.

Each server is held open by one task (the SDK's transports are anyio context managers that must be
entered and left in the same task); calls from other tasks share its ``ClientSession``. Every failure
(a server that won't start, a tool error, a timeout, a dead connection) becomes a ``ToolResult`` whose
text goes back to the model, so a reply never hangs on a tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from app.core.loop_thread import LoopThread
from app.core.safe_files import safe_file_name
from app.core.settings import paths
from app.core.settings.settings import ToolServer, loopback_url_problem, tool_key
from app.core.tls import tls_context

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 20.0
REQUEST_TIMEOUT = -32001  # the SDK's code for a request that timed out on the client (mcp_types.jsonrpc)
ToolStatus = Literal["ok", "error", "timeout", "denied"]
DENIED_TEXT = "The user denied this tool call; it did not run."


@dataclass(frozen=True)
class ToolInfo:
    """One tool a server offers, as listed by ``tools/list``."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]

    @property
    def key(self) -> str:
        return tool_key(self.server, self.name)

    def openai(self) -> dict[str, Any]:
        """The tool in OpenAI's ``tools`` shape, as the engine contract takes it."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.input_schema or {"type": "object"}}}


@dataclass(frozen=True)
class ToolResult:
    """What a call gave back, as text for the model; ``status`` says how it ended."""

    text: str
    status: ToolStatus


@dataclass(frozen=True)
class ServerState:
    """A configured server after connecting: its tools, or why there are none."""

    name: str
    tools: tuple[ToolInfo, ...] = ()
    problem: str | None = None
    config: ToolServer | None = None  # what it was started from: a changed setting is not this server any more


def result_text(content: Sequence[Any], structured: Any = None) -> str:
    """A CallToolResult's content as plain text: text blocks verbatim, other blocks named, never rendered."""
    parts = []
    for block in content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind or 'unknown'} content omitted]")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False))
    return "\n".join(parts)


class _Connection:
    """One server, held open by ``run`` until ``stop``."""

    def __init__(self, config: ToolServer) -> None:
        self.config = config
        self.session: Any = None
        self.tools: tuple[ToolInfo, ...] = ()
        self.problem: str | None = None
        self.ready = asyncio.Event()
        self.stopping = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        from mcp import ClientSession, StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        config = self.config
        errlog: TextIO | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                if config.command:
                    errlog = stack.enter_context(_server_log(config.name))
                    params = StdioServerParameters(command=config.command, args=list(config.args))
                    read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
                else:
                    if problem := loopback_url_problem(config.url):  # settings check it too; this costs nothing
                        raise ValueError(problem)
                    http = await stack.enter_async_context(_loopback_http_client())
                    read, write = await stack.enter_async_context(streamable_http_client(config.url, http_client=http))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                self.tools = await self._list_tools(session)
                self.session = session
                self.ready.set()
                await self.stopping.wait()
        except Exception as exc:  # noqa: BLE001 - any failure to reach the server is shown, not raised
            self.problem = describe_connect_failure(config, exc)
            log.warning("tool server %s: %s", config.name, self.problem, exc_info=True)
        finally:
            self.session = None
            self.ready.set()

    async def _list_tools(self, session: Any) -> tuple[ToolInfo, ...]:
        from mcp.types import PaginatedRequestParams

        tools: list[ToolInfo] = []
        cursor: str | None = None
        for _ in range(100):  # a server that pages forever can't hang the connection
            listing = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            tools += [ToolInfo(self.config.name, t.name, t.description or "", dict(t.input_schema or {}))
                      for t in listing.tools]
            cursor = listing.next_cursor
            if not cursor:
                break
        return tuple(tools)


def _loopback_http_client() -> Any:
    """The MCP SDK's HTTP client, but deaf to HTTP_PROXY and friends (trust_env=False): a loopback
    server's tool arguments and results must never travel through the user's proxy."""
    import httpx2
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    return httpx2.AsyncClient(timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
                              trust_env=False, verify=tls_context())


def _server_log(name: str) -> TextIO:
    """The server's stderr goes to its own log file, not into Nalar's terminal or the model."""
    folder = paths.private_dir(paths.log_dir())
    log_name = f"mcp-{safe_file_name(name, 'server')}.log"  # a server's name is free text: never a path
    return open(Path(folder) / log_name, "a", encoding="utf-8",  # noqa: SIM115 - closed by the stack
                opener=paths.private_opener)


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside anyio's exception groups."""
    while (inner := getattr(exc, "exceptions", None)) and isinstance(inner[0], BaseException):
        exc = inner[0]
    return exc


def describe_connect_failure(config: ToolServer, exc: BaseException) -> str:
    exc = _leaf(exc)
    if isinstance(exc, FileNotFoundError) or (isinstance(exc, OSError) and config.command):
        return (f"could not start {config.command!r} ({exc.strerror or exc}). Check the command in "
                "Settings → Tools.")
    if isinstance(exc, ValueError):
        return str(exc)
    where = config.url or config.command
    return f"{where} did not answer as an MCP server ({type(exc).__name__}: {exc}). See mcp-{config.name}.log."


class McpToolbox:
    """The configured servers and their tools. ``configure`` and ``call`` run on ``loop_thread``."""

    def __init__(self) -> None:
        self.loop_thread = LoopThread("nalar-tools")
        self._connections: dict[str, _Connection] = {}

    # ---- on the tools loop ---------------------------------------------------------------------

    async def configure(self, servers: Sequence[ToolServer],
                        connect_timeout: float = CONNECT_TIMEOUT_S) -> dict[str, ServerState]:
        """Connect to these servers (reusing unchanged ones), drop the others; what each offers now."""
        wanted = {server.name: server for server in servers}
        for name, connection in list(self._connections.items()):
            if wanted.get(name) != connection.config or connection.session is None:
                await self._drop(name)
        for name, server in wanted.items():
            if name not in self._connections:
                connection = _Connection(server)
                connection.task = asyncio.create_task(connection.run(), name=f"mcp-{name}")
                self._connections[name] = connection
        await asyncio.gather(*(self._wait_ready(c, connect_timeout) for c in self._connections.values()))
        return self.states()

    async def _wait_ready(self, connection: _Connection, timeout: float) -> None:
        try:
            await asyncio.wait_for(connection.ready.wait(), timeout)
        except asyncio.TimeoutError:
            connection.problem = f"did not finish connecting within {timeout:.0f} s."
            await self._drop(connection.config.name)
            self._connections[connection.config.name] = connection  # kept, to report its problem

    async def _drop(self, name: str) -> None:
        connection = self._connections.pop(name, None)
        if connection is None or connection.task is None:
            return
        connection.stopping.set()
        try:
            await asyncio.wait_for(asyncio.shield(connection.task), 10)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - a stuck server is cancelled
            connection.task.cancel()
            with contextlib.suppress(BaseException):
                await connection.task

    def states(self) -> dict[str, ServerState]:
        return {name: ServerState(name, c.tools if c.session is not None else (), c.problem, c.config)
                for name, c in self._connections.items()}

    def tools(self) -> list[ToolInfo]:
        """Every tool of every connected server."""
        return [tool for c in self._connections.values() if c.session is not None for tool in c.tools]

    def find(self, name: str, offered: Sequence[ToolInfo] | None = None) -> ToolInfo | None:
        """The tool the model named (among those offered to it, when given)."""
        return next((t for t in (self.tools() if offered is None else offered) if t.name == name), None)

    async def call(self, tool: ToolInfo, arguments: str, timeout: float) -> ToolResult:
        """Run one approved call. Never raises: every failure is a result the model can read."""
        from mcp.shared.exceptions import MCPError

        try:
            parsed = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            return ToolResult(f"Error: the arguments are not valid JSON ({exc.msg}); the tool did not run.", "error")
        if not isinstance(parsed, dict):
            return ToolResult("Error: the arguments must be a JSON object; the tool did not run.", "error")
        connection = self._connections.get(tool.server)
        if connection is None or connection.session is None:
            reason = connection.problem if connection and connection.problem else "it is not connected"
            return ToolResult(f"Error: the tool server {tool.server!r} is unavailable: {reason}", "error")
        started = time.monotonic()
        try:
            result = await connection.session.call_tool(tool.name, parsed, read_timeout_seconds=timeout)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return ToolResult(f"Error: the tool {tool.name} did not answer within {timeout:g} s; it was "
                                  "cancelled.", "timeout")
            return ToolResult(f"Error from the tool {tool.name}: {exc.message}", "error")
        except Exception as exc:  # noqa: BLE001 - a dead connection, a bad reply: the model is told
            log.warning("tool %s failed after %.1f s", tool.key, time.monotonic() - started, exc_info=True)
            return ToolResult(f"Error: the call to {tool.name} failed ({type(_leaf(exc)).__name__}: "
                              f"{_leaf(exc)}).", "error")
        text = result_text(result.content, result.structured_content)
        return ToolResult(text, "error" if result.is_error else "ok")

    async def aclose(self) -> None:
        for name in list(self._connections):
            await self._drop(name)

    # ---- from any thread -----------------------------------------------------------------------

    def close(self, timeout: float = 15.0) -> None:
        """End every server (their processes too) and the loop thread."""
        if self.loop_thread.alive:
            with contextlib.suppress(Exception):
                self.loop_thread.submit(self.aclose()).result(timeout)
            self.loop_thread.stop()
