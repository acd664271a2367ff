"""A remote server whose error text echoes the request's API key: the key never reaches a banner, a status line
or the log. A real HTTP stand-in on 127.0.0.1 that quotes the Authorization header back; no engine."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import openai
import pytest

from app.core.settings import paths
from app.core.settings.keystore import KeyStore, new_token, profile_entry
from app.core.settings.logs import configure_logging
from app.core.settings.redaction import REDACTED, redact, remember_secret
from app.core.settings.settings import EndpointProfile, EngineConfig, SamplingConfig
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import EngineErrorEvent, EngineEvent
from app.engine.remote.remote import RemoteEngine, endpoint_failure
from app.engine.requests import Resume
from tests.support.vllm_standin import VllmStandIn, vllm_standin

HANG_GUARD_S = 60


@pytest.fixture
def server() -> Iterator[VllmStandIn]:
    with vllm_standin() as served:
        yield served


def remote(server: VllmStandIn, key: str, model: str = "Qwen/Qwen3-8B") -> RemoteEngine:
    return RemoteEngine(EndpointProfile(name="box", base_url=server.base_url, model=model), key,
                        first_token_timeout_s=HANG_GUARD_S)


def failure_of_reply(engine: RemoteEngine, resume: Resume | None = None) -> EngineFailure:
    events: list[EngineEvent] = []
    engine.loop_thread.submit(engine.stream_to(events.append, [{"role": "user", "content": "hi"}], SamplingConfig(),
                                               "r1", resume=resume)).result(HANG_GUARD_S)
    errors = [event.failure for event in events if isinstance(event, EngineErrorEvent)]
    assert len(errors) == 1, events
    return errors[0]


def failure_of_resume(server: VllmStandIn, key: str) -> EngineFailure:
    """The failure of a resume (pause–edit–resume's /tokenize first) on a profile holding ``key``."""
    engine = remote(server, key)
    try:
        engine.loop_thread.submit(engine.start(EngineConfig())).result(HANG_GUARD_S)
        return failure_of_reply(engine, Resume("thinking", "Step 1"))
    finally:
        engine.close()


def test_a_chat_error_that_echoes_the_key_shows_it_redacted(server: VllmStandIn) -> None:
    """Hostile input: a 400 whose error message quotes the request's "Authorization: Bearer <key>". Bug caught:
    the server's text went into the banner as it was, the user's API key with it."""
    key = "sk-proj-" + new_token()
    server.refuse["/v1/chat/completions"] = 400
    engine = remote(server, key)
    try:
        engine.loop_thread.submit(engine.start(EngineConfig())).result(HANG_GUARD_S)
        failure = failure_of_reply(engine)
    finally:
        engine.close()
    assert failure.kind is FailureKind.REQUEST_FAILED and "Bad request: header" in failure.message, failure
    assert key not in str(failure) and REDACTED in failure.message


def test_a_start_refused_with_the_key_echoed_fails_without_it(server: VllmStandIn) -> None:
    """Hostile input: /v1/models answers 500 quoting the key. Bug caught: the start's failure (banner and
    status line) held the key."""
    key = "sk-proj-" + new_token()
    server.refuse["/v1/models"] = 500
    statuses: list[EngineEvent] = []
    engine = remote(server, key)
    engine.set_status_sink(statuses.append)
    try:
        with pytest.raises(EngineFailure) as raised:
            engine.loop_thread.submit(engine.start(EngineConfig())).result(HANG_GUARD_S)
    finally:
        engine.close()
    assert "500" in raised.value.message and key not in str(raised.value), raised.value
    assert not any(key in repr(status) for status in statuses)


def test_a_tokenize_error_that_echoes_the_key_shows_it_redacted(server: VllmStandIn) -> None:
    """Hostile input: during a resume, /tokenize answers 400 quoting the key. Bug caught: the continuation's
    error text reached the banner unredacted."""
    key = "sk-proj-" + new_token()
    server.on_tokenize = server.answer_with(f'{{"detail": "token Bearer {key} has no access"}}'.encode(), 400)
    failure = failure_of_resume(server, key)
    assert "/tokenize answered 400" in failure.message and key not in failure.message, failure
    assert REDACTED in failure.message


def test_keys_from_the_keystore_and_the_api_token_are_redacted_wherever_they_are_quoted() -> None:
    """Hostile input: a profile's stored key and the local API server's token, quoted raw, URL-encoded and
    JSON-escaped in outside text. Bug caught: nothing knew Nalar's secrets, so nothing kept them out."""
    keys = KeyStore()
    key = 'sk-"quoted"/' + new_token()
    keys.set(profile_entry("gpu-box"), key)
    token = keys.api_server_token()
    as_json, in_url = key.replace('"', '\\"'), quote(key, safe="")
    echoed = f"bad key {key}; as JSON {as_json}; in a URL ?k={in_url}"
    shown = EngineFailure(FailureKind.REQUEST_FAILED, echoed, f"your token {token} was refused")
    assert key not in str(shown) and as_json not in shown.message and in_url not in shown.message, shown
    assert shown.message.count(REDACTED) == 3 and token not in shown.fix, shown
    assert redact("nothing secret here") == "nothing secret here"


def test_the_log_never_holds_a_remembered_key(isolated_dirs: Path) -> None:
    """Hostile input: a server's text with the key, logged as a message and inside a traceback. Bug caught: the
    log's lines were written as they came."""
    key = "sk-proj-" + new_token()
    RemoteEngine(EndpointProfile(name="box", base_url="http://127.0.0.1:9/v1"), key).close()
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    configure_logging(console=False)
    try:
        log = logging.getLogger("tests.hostile.secrets")
        log.warning("the server said: %s", f"key {key} refused")
        try:
            raise ValueError(f"echo {key}")
        except ValueError:
            log.exception("a request failed")
    finally:
        for handler in [h for h in root.handlers if h not in before]:
            handler.close()
            root.removeHandler(handler)
        root.setLevel(level)
    text = (paths.log_dir() / "nalar.log").read_text(encoding="utf-8")
    assert "the server said: key [redacted] refused" in text and "echo [redacted]" in text
    assert key not in text


def test_a_key_echoed_across_the_messages_cut_leaves_no_part_of_it(server: VllmStandIn) -> None:
    """Hostile input: error text that puts the key across the 200th character, where the banner's quote of it
    is cut. Bug caught: text cut first and redacted after, so the key's first characters were shown."""
    key = "sk-" + secrets.token_hex(24)
    remember_secret(key)
    cut_at = 200
    response = httpx.Response(500, request=httpx.Request("GET", "http://box/v1/chat/completions"))
    chat = endpoint_failure(openai.InternalServerError("x" * (cut_at - 10) + key, response=response, body=None),
                            EndpointProfile(name="box", base_url="http://box/v1"), "m", 5)
    server.on_tokenize = server.answer_with(('{"detail": "' + "x" * (cut_at - 22) + key + '"}').encode(), 400)
    tokenize = failure_of_resume(server, key)
    for failure in (chat, tokenize):
        assert "answered" in failure.message and key[:8] not in failure.message, failure
