"""Tools the model may call: MCP servers the user configured, reached through the official `mcp` SDK.

No Qt here (the layering test covers this folder): the window drives it through its loop thread.
"""
