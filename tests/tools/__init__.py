"""Tests of app/tools (MCP)."""
