"""A hostile or broken vLLM server under a remote profile's pause–edit–resume: /tokenize and /detokenize that
never answer, answer a token list far past the model's context, or answer the wrong types. Each reply ends
(Stop reaches every step), bounded, with a message that names the server's endpoint and says to check the
server, not to restart Nalar's engine. A real HTTP stand-in on 127.0.0.1; no engine."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator

import pytest

from app.core.settings.settings import EndpointProfile, EngineConfig, SamplingConfig
from app.engine.errors import FailureKind
from app.engine.events import EngineErrorEvent, EngineEvent, Finished
from app.engine.remote.remote import RemoteEngine
from app.engine.requests import Resume
from tests.support.vllm_standin import VllmStandIn, vllm_standin

MODEL = "Qwen/Qwen3-8B"  # thinks in plain <think> tags: a remote profile can resume it
PAUSED = Resume("thinking", "Step 1: 300 cm.\nHint: check the units.")
HANG_GUARD_S = 60  # only against a hang: a reply that works ends long before


@pytest.fixture
def server() -> Iterator[VllmStandIn]:
    with vllm_standin(max_model_len=4096) as served:
        yield served


@pytest.fixture
def engine(server: VllmStandIn) -> Iterator[RemoteEngine]:
    # A budget no test waits out: a reply that ends did so because of what the test did, not a timeout.
    remote = RemoteEngine(EndpointProfile(name="box", base_url=server.base_url, model=MODEL), "sk-box-key",
                          first_token_timeout_s=600)
    try:
        remote.loop_thread.submit(remote.start(EngineConfig())).result(HANG_GUARD_S)
        assert remote.can_resume, remote.resume_refusal
        yield remote
    finally:
        remote.close()


def resume(engine: RemoteEngine, events: list[EngineEvent]) -> concurrent.futures.Future[Finished | None]:
    return engine.loop_thread.submit(engine.stream_to(events.append, [{"role": "user", "content": "3 m in cm?"}],
                                                      SamplingConfig(), "r1", resume=PAUSED))


def ended_with_failure(engine: RemoteEngine) -> EngineErrorEvent:
    events: list[EngineEvent] = []
    resume(engine, events).result(HANG_GUARD_S)
    errors = [event for event in events if isinstance(event, EngineErrorEvent)]
    assert len(errors) == 1 and isinstance(events[-1], Finished) and events[-1].reason == "error", events
    assert events[-1].thinking_text == PAUSED.thinking, "the kept thinking stays with the reply"
    return errors[0]


def root(server: VllmStandIn) -> str:
    return server.base_url.removesuffix("/v1")


def test_a_resume_through_a_sound_server_goes_on_from_the_kept_thinking(server: VllmStandIn,
                                                                        engine: RemoteEngine) -> None:
    """The path every hostile case below leaves: the rendered prompt and the kept text go to /v1/completions as
    ids, and the reply goes on from the kept thinking. Bug caught: a bounded read that drops a sound answer."""
    events: list[EngineEvent] = []
    finished = resume(engine, events).result(HANG_GUARD_S)
    assert finished is not None and finished.reason == "stop", events
    assert finished.thinking_text == PAUSED.thinking + "so 3 m."
    sent = "".join(chr(token) for token in server.completions[0]["prompt"])
    assert sent.startswith("user: 3 m in cm?\n") and sent.endswith("<think>\n" + PAUSED.thinking)


def test_stop_ends_a_resume_whose_tokenize_never_answers(server: VllmStandIn, engine: RemoteEngine) -> None:
    """Hostile input: a /tokenize that takes the request and never answers. Bug caught: the continuation's
    requests ran outside Stop's reach with no read timeout, so the reply hung and Stop did nothing."""
    server.on_tokenize = server.never_answer
    events: list[EngineEvent] = []
    reply = resume(engine, events)
    assert server.tokenize_asked.wait(HANG_GUARD_S)
    engine.loop_thread.submit(engine.abort("r1")).result(HANG_GUARD_S)
    finished = reply.result(HANG_GUARD_S)
    assert finished is not None and finished.reason == "abort", events
    assert finished.thinking_text == PAUSED.thinking
    assert server.completions == []


def test_a_tokenize_that_never_answers_times_out_naming_the_endpoint(server: VllmStandIn,
                                                                     engine: RemoteEngine) -> None:
    """Hostile input: a /tokenize that never answers, and no Stop. Bug caught: no read timeout (the reply
    waited for ever); the timeout is the profile's first-token budget and the message names /tokenize."""
    server.on_tokenize = server.never_answer
    engine.first_token_timeout_s = 0.5
    failure = ended_with_failure(engine).failure
    assert failure.kind is FailureKind.TIMEOUT and f"{root(server)}/tokenize" in failure.message, failure
    assert "restart" not in failure.fix.lower()


def test_a_token_list_past_the_models_context_is_refused_unread(server: VllmStandIn, engine: RemoteEngine) -> None:
    """Hostile input: /tokenize answers 5,000,000 tokens (35 MB) for a model whose context is 4,096. Bug caught:
    the whole answer was read, parsed and sent on (the engine loop blocked for over 90 s); now reading stops
    past what 4,096 tokens can take, and the reply ends saying so."""
    count = 5_000_000
    server.on_tokenize = server.huge_token_list(count)
    failure = ended_with_failure(engine).failure
    assert failure.kind is FailureKind.PROMPT_TOO_LONG, failure
    assert f"{root(server)}/tokenize" in failure.message and "4,096" in failure.message, failure.message
    assert server.bytes_sent < count * len(b"151643, ") // 2, "the stand-in wrote what no one read"
    assert server.completions == []


@pytest.mark.parametrize("answer", [
    b'{"tokens": "x"}', b'{"tokens": [1, "a"]}', b'{"count": 2, "max_model_len": 4096}', b"tokens: 1 2 3",
    b'[1, 2]', b'{"tokens": [1.5, 2]}', b'{"tokens": [true]}', b'{"tokens": [-1]}', b"[" * 100_000,
], ids=["tokens-a-string", "a-string-token", "no-tokens-key", "not-json", "not-an-object", "a-float-token",
        "a-bool-token", "a-negative-token", "nested-100000-deep"])
def test_a_malformed_tokenize_answer_is_the_servers_fault(server: VllmStandIn, engine: RemoteEngine,
                                                          answer: bytes) -> None:
    """Hostile input: a /tokenize answer of the wrong shape or types. Bug caught: ValueError, KeyError or
    RecursionError escaped the reply, shown as "The engine failed… Restart the engine" (wrong cause, wrong fix)."""
    server.on_tokenize = server.answer_with(answer)
    failure = ended_with_failure(engine).failure
    assert failure.kind is FailureKind.BAD_SERVER_ANSWER, failure
    assert f"{root(server)}/tokenize" in failure.message
    assert "check the server" in failure.fix.lower() and "restart" not in failure.fix.lower(), failure.fix
    assert server.completions == []


def test_a_detokenize_answer_without_its_text_is_the_servers_fault(server: VllmStandIn,
                                                                    engine: RemoteEngine) -> None:
    """Hostile input: /detokenize answers {} (no "prompt"). Bug caught: a KeyError shown as the engine's fault."""
    server.on_detokenize = server.answer_with(b"{}")
    failure = ended_with_failure(engine).failure
    assert failure.kind is FailureKind.BAD_SERVER_ANSWER and f"{root(server)}/detokenize" in failure.message, failure
