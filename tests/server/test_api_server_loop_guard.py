"""The local API server applies the loop guard and says so, over real HTTP (scripted engine: a fixed loop)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from app.core.settings.keystore import new_token
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.scripted import Script, ScriptedEngineDouble
from app.server.api_server import LocalApiServer
from tests.support import loopback_http

INTRO = [f"word{i} " for i in range(300)]
TOKEN = new_token()
PASSAGE = ["So ", "the ", "pens ", "cost ", "21 ", "dollars ", "again, ", "so "]


@pytest.fixture
def server() -> Iterator[LocalApiServer]:
    engine = ScriptedEngineDouble([Script(INTRO + PASSAGE * 40, tokens_per_second=5000) for _ in range(2)])
    engine.loop_thread.submit(engine.start(EngineConfig(max_model_len=2048))).result(10)
    api = LocalApiServer(engine, TOKEN, port=0, sampling=SamplingConfig(think_budget=0, max_tokens=1024))
    engine.loop_thread.submit(api.start()).result(10)
    yield api
    engine.loop_thread.submit(api.stop()).result(10)
    engine.close()


def post(api: LocalApiServer, stream: bool) -> httpx.Response:
    body = {"model": "any", "stream": stream, "messages": [{"role": "user", "content": "Change?"}]}
    return loopback_http.post(f"{api.url}/chat/completions", timeout=30, headers={"Authorization": f"Bearer {TOKEN}"},
                              json=body)


def test_a_streamed_loop_is_cut_and_the_stream_says_so(server: LocalApiServer) -> None:
    lines = [line[6:] for line in post(server, stream=True).text.splitlines() if line.startswith("data: {")]
    chunks = [json.loads(line) for line in lines]
    notes = [c["choices"][0]["delta"] for c in chunks if c["choices"] and "loop_guard" in c["choices"][0]["delta"]]
    assert len(notes) == 1 and notes[0]["loop_guard"].startswith("looped: one 8-token passage")
    kept = "".join(INTRO + PASSAGE)
    assert notes[0]["loop_guard_kept_chars"] == len(kept)


def test_a_plain_completion_agrees_with_the_stream_and_marks_the_loop(server: LocalApiServer) -> None:
    """Bug caught: the plain reply cut after the loop's first copy while a stream of the same request had
    already sent the copies (14 vs 269 characters; canitoolcall's stream-equals-non-stream row). Both now
    keep what the stream sent, and both say where the guard would cut."""
    chunks = [json.loads(line[6:]) for line in post(server, stream=True).text.splitlines()
              if line.startswith("data: {")]
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    message = post(server, stream=False).json()["choices"][0]["message"]
    assert message["content"] == streamed and len(streamed) > len("".join(INTRO + PASSAGE))
    assert "cut" in message["loop_guard"] and message["loop_guard_kept_chars"] == len("".join(INTRO + PASSAGE))
