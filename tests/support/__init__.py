"""Helpers the tests share: scripted doubles (named so), local servers, golden streams and their data."""

from pathlib import Path

MCP_DEMO_SERVER = str(Path(__file__).with_name("mcp_demo_server.py"))  # a real stdio MCP server the tests start
