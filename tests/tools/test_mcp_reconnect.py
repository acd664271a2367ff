"""Reconnecting an MCP server that failed before (issue 39, item 12), on a real stdio server process."""

from __future__ import annotations

import sys
from pathlib import Path

from app.core.settings.settings import ToolServer
from app.tools.mcp_client import McpToolbox
from tests.support import MCP_DEMO_SERVER

# The demo server, but only once ``flag`` exists: before that it exits at once, as a server whose
# dependency is not installed yet does.
UNTIL_FLAG = ("import os, runpy, sys\n"
              "flag, demo = sys.argv[1:3]\n"
              "if not os.path.exists(flag):\n"
              "    sys.exit('nalar test: not ready yet')\n"
              "sys.argv = [demo]\n"
              "runpy.run_path(demo, run_name='__main__')\n")


def test_configuring_again_retries_a_server_that_failed_with_the_same_settings(tmp_path: Path) -> None:
    """Bug caught: configure() kept a failed connection whose settings had not changed, so a server that
    failed once (not started yet, a missing dependency since installed) stayed "failed" until its settings
    were edited or Nalar restarted, though Reconnect was pressed."""
    flag = tmp_path / "ready"
    server = ToolServer(name="late", command=sys.executable, args=("-c", UNTIL_FLAG, str(flag), MCP_DEMO_SERVER))
    box = McpToolbox()
    try:
        first = box.loop_thread.submit(box.configure([server], connect_timeout=30)).result(60)
        assert first["late"].problem, "the server exited: it must be reported"
        assert box.tools() == []
        flag.touch()
        again = box.loop_thread.submit(box.configure([server], connect_timeout=30)).result(60)
        assert again["late"].problem is None, again["late"].problem
        assert "add" in {tool.name for tool in again["late"].tools}
        add = box.find("add")
        assert add is not None
        result = box.loop_thread.submit(box.call(add, '{"a": 20, "b": 22}', 20)).result(30)
        assert (result.status, result.text) == ("ok", "42")
    finally:
        box.close()
