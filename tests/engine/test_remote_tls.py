"""A remote profile over HTTPS: the chat client and the /tokenize probe trust the same roots, from one context.

Real TLS on 127.0.0.1, with a certificate from a CA made for the test and named by SSL_CERT_FILE (the way a
user points Nalar at a company CA); the real openai and httpx clients inside RemoteEngine.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest

from app.core.settings.settings import EndpointProfile, EngineConfig, SamplingConfig
from app.core.tls import tls_context
from app.engine.events import EngineEvent, Finished
from app.engine.remote.remote import RemoteEngine
from tests.support.sse_server import scripted_sse_server
from tests.support.throwaway_ca import throwaway_ca
from tests.support.vllm_standin import VllmStandIn


@pytest.fixture
def fresh_tls_context() -> Any:
    """The process's context is built anew from this test's environment, and again after it."""
    tls_context.cache_clear()
    yield
    tls_context.cache_clear()


def test_an_https_server_is_reached_by_the_chat_and_the_probe_with_one_read_of_the_roots(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_tls_context: None) -> None:
    """Bugs caught: the /tokenize probe trusting other roots than the chat client (it had certifi's, the chat
    the system's: a server behind a CA only the system trusts answered but never resumed); each client reading
    the CA bundle again (30 to 50 ms of CPU per connect, four reads for these two engines)."""
    ca_file, server_tls = throwaway_ca(tmp_path / "ca")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    reads: list[str] = []  # the CA files read
    read_roots = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        reads.append(args[0] if args else kwargs.get("cafile"))
        read_roots(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    server = VllmStandIn()
    server.tls = server_tls
    with scripted_sse_server(server):
        assert server.base_url.startswith("https://127.0.0.1:")
        server.scripts["how far?"] = [{"reasoning_content": "300 cm"}, {"content": "3 m"}]
        engines = [RemoteEngine(EndpointProfile(name=f"tls {n}", base_url=server.base_url, model="Qwen/Qwen3-8B"),
                                "sk-test", first_token_timeout_s=10) for n in range(2)]
        try:
            for engine in engines:
                engine.loop_thread.submit(engine.start(EngineConfig())).result(30)
                assert engine.can_resume, engine.resume_refusal  # the probe's /tokenize answered over TLS
            events: list[EngineEvent] = []
            engines[1].loop_thread.submit(engines[1].stream_to(events.append, [{"role": "user", "content": "how far?"}],
                                                               SamplingConfig(), "r")).result(30)
        finally:
            for engine in engines:
                engine.close()
    final = events[-1]
    assert isinstance(final, Finished) and final.reason == "stop" and final.answer_text == "3 m", final
    assert reads == [str(ca_file)], "one read of the roots for both engines' chat clients and probes"
