"""McpToolbox against real MCP servers: a stdio child process and streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import socketserver
import sys
import threading
import time
from collections.abc import Iterator

import psutil
import pytest
from pydantic import ValidationError

from app.core.settings.settings import (
    Settings,
    ToolsConfig,
    ToolServer,
    changed,
    load_settings,
    save_settings,
    settings_path,
)
from app.tools.mcp_client import McpToolbox, ToolInfo
from tests.support import MCP_DEMO_SERVER
from tests.support.mcp_demo import http_demo_server

DEMO = MCP_DEMO_SERVER
DEMO_SERVER = ToolServer(name="demo", command=sys.executable, args=(DEMO,))


@pytest.fixture(scope="module")
def toolbox() -> Iterator[McpToolbox]:
    box = McpToolbox()
    yield box
    box.close()


def run(box: McpToolbox, coro, timeout: float = 60):  # type: ignore[no-untyped-def]
    return box.loop_thread.submit(coro).result(timeout)


def demo_children() -> list[psutil.Process]:
    """This process's demo servers. A server an earlier test ended may linger as a zombie (nobody reaped
    it yet), and a zombie's command line can't be read: it is not running, so it is skipped."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if DEMO in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def test_lists_the_tools_of_a_stdio_server_in_openai_shape(toolbox) -> None:
    """Bug caught: tools listed under the wrong server, or a schema lost on the way to the engine (the model
    would be offered a function with no parameters)."""
    states = run(toolbox, toolbox.configure([DEMO_SERVER]))
    assert states["demo"].problem is None
    names = {t.name for t in states["demo"].tools}
    assert {"add", "slow", "fails", "markup"} <= names
    add = toolbox.find("add")
    assert add is not None and add.key == "demo/add"
    spec = add.openai()
    assert spec["type"] == "function" and spec["function"]["name"] == "add"
    assert set(spec["function"]["parameters"]["properties"]) == {"a", "b"}


def test_a_call_returns_the_tools_text(toolbox) -> None:
    """Bug caught: arguments passed as a JSON string instead of an object, or the result's text blocks lost."""
    run(toolbox, toolbox.configure([DEMO_SERVER]))
    result = run(toolbox, toolbox.call(toolbox.find("add"), '{"a": 2, "b": 40}', timeout=20))
    assert (result.status, result.text) == ("ok", "42")


def test_errors_and_timeouts_become_results_for_the_model(toolbox) -> None:
    """Bug caught: a tool that raises, hangs or gets bad JSON making the reply hang or crash instead of the
    model being told; and a timed-out call leaving the connection unusable for the next one."""
    run(toolbox, toolbox.configure([DEMO_SERVER]))
    failed = run(toolbox, toolbox.call(toolbox.find("fails"), '{"reason": "disk on fire"}', timeout=20))
    assert failed.status == "error" and "fails" in failed.text
    bad = run(toolbox, toolbox.call(toolbox.find("add"), '{"a": 2,', timeout=20))
    assert bad.status == "error" and "not valid JSON" in bad.text
    started = time.monotonic()
    slow = run(toolbox, toolbox.call(toolbox.find("slow"), '{"seconds": 600}', timeout=0.5))
    assert slow.status == "timeout" and "0.5 s" in slow.text
    assert time.monotonic() - started < 30
    after = run(toolbox, toolbox.call(toolbox.find("add"), '{"a": 1, "b": 1}', timeout=20))
    assert (after.status, after.text) == ("ok", "2")


def test_a_server_that_cannot_start_is_named_with_its_fix() -> None:
    """Bug caught: a typo in a server command hanging the tools thread or raising into the UI."""
    box = McpToolbox()
    try:
        states = run(box, box.configure([ToolServer(name="typo", command="/nonexistent/mcp-server")]))
        assert "could not start" in (states["typo"].problem or "") and "Settings → Tools" in states["typo"].problem
        assert box.tools() == []
        missing = ToolInfo("typo", "x", "", {})
        result = run(box, box.call(missing, "{}", 5))
        assert result.status == "error" and "unavailable" in result.text
    finally:
        box.close()


def test_removing_a_server_ends_its_process() -> None:
    """Bug caught: a stdio server left running after it is removed from settings or the app closes."""
    box = McpToolbox()
    try:
        before = {p.pid for p in demo_children()}  # the module's toolbox has its own
        run(box, box.configure([DEMO_SERVER]))
        started = [p for p in demo_children() if p.pid not in before]
        assert started, "the server process did not start"
        run(box, box.configure([]))
        assert box.tools() == []
        _, alive = psutil.wait_procs(started, timeout=10)
        assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []
    finally:
        box.close()


def test_streamable_http_on_loopback() -> None:
    """Bug caught: the HTTP transport wired wrong (only stdio ever tested), so URL servers never list tools."""
    box = McpToolbox()
    with http_demo_server() as port:
        try:
            config = ToolServer(name="web", url=f"http://127.0.0.1:{port}/mcp")
            states = run(box, box.configure([config]))
            assert states["web"].problem is None, states["web"].problem
            result = run(box, box.call(box.find("add"), '{"a": 3, "b": 4}', 20))
            assert (result.status, result.text) == ("ok", "7")
        finally:
            box.close()


class ProxyCatcher(socketserver.ThreadingTCPServer):
    """A "proxy" on 127.0.0.1 that only notes who connected and answers 502."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        super().__init__(("127.0.0.1", 0), _ProxyHandler)


class _ProxyHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        assert isinstance(self.server, ProxyCatcher)
        self.server.seen.append(self.request.recv(4096))
        self.request.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


def test_loopback_mcp_traffic_never_goes_through_the_users_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug caught: the SDK's HTTP client read HTTP_PROXY (trust_env), so a tool's arguments and results bound
    for a server on 127.0.0.1 went to the user's proxy instead."""
    proxy = ProxyCatcher()
    threading.Thread(target=proxy.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}"
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, proxy_url)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    box = McpToolbox()
    try:
        with http_demo_server() as port:
            states = run(box, box.configure([ToolServer(name="web", url=f"http://127.0.0.1:{port}/mcp")]))
            assert states["web"].problem is None, states["web"].problem
            result = run(box, box.call(box.find("add"), '{"a": 3, "b": 4}', 20))
            assert (result.status, result.text) == ("ok", "7")
    finally:
        box.close()
        proxy.shutdown()
        proxy.server_close()
    assert proxy.seen == []


@pytest.mark.parametrize("url", ["http://example.com/mcp", "http://10.0.0.5:8000/mcp", "ftp://127.0.0.1/x",
                                 "http://127.0.0.1.evil.com/mcp"])
def test_only_loopback_urls_are_accepted(url: str) -> None:
    """Bug caught: a tool server URL on another machine accepted, sending prompts' tool arguments off the box."""
    with pytest.raises(ValidationError):
        ToolServer(name="x", url=url)
    assert ToolServer(name="x", url="http://[::1]:9000/mcp").url


def test_tools_settings_round_trip_and_an_older_file_loads() -> None:
    """Bug caught: the new tools section breaking settings written before it existed (defaults must load,
    not a "corrupt file" reset), or server args lost on save."""
    settings_path().parent.mkdir(parents=True, exist_ok=True)
    settings_path().write_text('{"schema_version": 1, "engine": {"max_model_len": 8192}}')
    loaded, notice = load_settings()
    assert notice is None and loaded.tools == ToolsConfig() and loaded.engine.max_model_len == 8192
    tools = ToolsConfig(servers=(DEMO_SERVER,), disabled=("demo/slow",), always_allow=("demo/add",))
    save_settings(Settings(tools=tools))
    assert load_settings()[0].tools == tools
    with pytest.raises(ValidationError):
        ToolsConfig(servers=(DEMO_SERVER, DEMO_SERVER))


def test_always_allow_goes_with_its_server_and_a_new_one_of_the_same_name_starts_with_none() -> None:
    """Bug caught: grants were keyed by server and tool name and outlived the server's removal, so a new
    server added under the same name inherited them, and its delete_file ran unasked."""
    first = ToolServer(name="files", command=sys.executable, args=(DEMO,))
    granted = Settings(tools=ToolsConfig(servers=(first,), always_allow=("files/delete_file", "files/add")))
    save_settings(granted)
    assert load_settings()[0].tools.always_allow == ("files/delete_file", "files/add")
    removed = changed(granted, tools=changed(granted.tools, servers=()).model_dump())
    save_settings(removed)
    assert load_settings()[0].tools.always_allow == ()
    stranger = ToolServer(name="files", command=sys.executable, args=(DEMO, "--another"))
    save_settings(changed(removed, tools=changed(removed.tools, servers=(stranger,)).model_dump()))
    reloaded = load_settings()[0].tools
    assert reloaded.servers == (stranger,) and reloaded.always_allow == ()


def test_a_grant_for_a_server_not_configured_is_dropped_on_load() -> None:
    """Bug caught: a settings file whose always_allow names a server it doesn't configure (removed by hand,
    or by an older Nalar) handed that grant to whichever server is added next under the name."""
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema_version": 1, "tools": {"always_allow": ["files/delete_file"]}}))
    loaded, notice = load_settings()
    assert notice is None and loaded.tools.always_allow == ()
