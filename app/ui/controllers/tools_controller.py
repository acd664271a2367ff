"""ToolsController: the MCP servers above their loop thread, for the window, the session and Settings → Tools.

It owns the ``McpToolbox`` (its own asyncio loop thread, like the engine's) and keeps the last snapshot
of what each server offers, so the GUI thread never reads the toolbox's live state.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Signal

from app.core.settings.settings import ToolsConfig, ToolServer
from app.tools.mcp_client import McpToolbox, ServerState, ToolInfo, ToolResult
from app.ui.controllers.operations import Operation, run_on

log = logging.getLogger(__name__)


class ToolsController(QObject):
    """Connects to the configured servers; says which tools a chat may offer; runs an approved call."""

    servers_changed = Signal()  # ``states`` holds a new snapshot
    notice = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.toolbox = McpToolbox()
        self.states: dict[str, ServerState] = {}
        self.connecting = False

    def configure(self, servers: tuple[ToolServer, ...]) -> Operation[dict[str, ServerState]] | None:
        """Connect to ``servers`` (unchanged ones are kept); each server's tools or problem lands in ``states``."""
        if not self.toolbox.loop_thread.alive:
            return None
        self.connecting = True
        return run_on(self.toolbox.loop_thread, "Connecting the tool servers", self.toolbox.configure(servers),
                      parent=self).success(self._connected).failure(self._not_connected)

    def sync(self, wanted: tuple[ToolServer, ...], before: tuple[ToolServer, ...] | None = None) -> None:
        """Connect the servers the settings name, and only those: after a settings change (``before``: the
        servers saved until then), or after Settings closed without saving (its Tools tab may have tried others)."""
        if wanted != before or set(self.states) != {server.name for server in wanted}:
            self.configure(wanted)

    def _connected(self, states: dict[str, ServerState]) -> None:
        self.connecting = False
        self.states = states
        self.servers_changed.emit()
        problems = [f"{name}: {state.problem}" for name, state in self.states.items() if state.problem]
        if problems:
            self.notice.emit("A tool server is unavailable — " + "; ".join(problems))

    def _not_connected(self, exc: Exception) -> None:
        """A bug in the toolbox (each server's own problem is in its state): the runner logged it."""
        self.connecting = False
        self.servers_changed.emit()
        self.notice.emit(f"The tool servers could not be connected ({type(exc).__name__}: {exc}). "
                         "See the log folder (Help → Open log folder).")

    def offered(self, config: ToolsConfig) -> list[ToolInfo]:
        """The tools switched on, of servers as saved in ``config``; one per name (a later server's tool of the
        same name is not offered)."""
        tools: dict[str, ToolInfo] = {}
        for state in self.states.values():
            if state.config is None or config.server(state.name) != state.config:
                continue  # connected for a look in Settings, not (or no longer) in the saved settings
            for tool in state.tools:
                if tool.key not in config.disabled and tool.name not in tools:
                    tools[tool.name] = tool
        return list(tools.values())

    async def call(self, tool: ToolInfo, arguments: str, timeout: float) -> ToolResult:
        return await run_on(self.toolbox.loop_thread, f"Calling the tool {tool.name}",
                            self.toolbox.call(tool, arguments, timeout), parent=self)

    def close(self) -> None:
        """Blocking: every server process ends with the window."""
        self.toolbox.close()
