"""FailoverEngine's decisions, against ScriptedEngineDoubles (deterministic timing), and unreachable
remote endpoints on 127.0.0.1 (a closed port, a listener that never answers, one whose backlog is full)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest

from app.core.settings.keystore import new_token
from app.core.settings.settings import EndpointProfile, EngineConfig, SamplingConfig
from app.engine.base import EngineBase
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import AnswerDelta, BackendChosen, EngineErrorEvent, EngineEvent, Finished
from app.engine.remote.failover import FailoverEngine
from app.engine.remote.remote import RemoteEngine
from app.engine.scripted import Script, ScriptedEngineDouble
from app.server.api_server import LocalApiServer
from tests.support.vllm_server import closed_port

QUICK = Script(["<think>fallback thinks</think>", "fallback answers"])


class Named(ScriptedEngineDouble):
    def __init__(self, name: str, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.backend_name = name


def run(engine: EngineBase, rid: str = "r1") -> tuple[list[EngineEvent], float]:
    events: list[EngineEvent] = []
    started = time.monotonic()
    engine.loop_thread.submit(engine.stream_to(events.append, [{"role": "user", "content": "hi"}],
                                               SamplingConfig(), rid)).result(30)
    return events, time.monotonic() - started


@pytest.fixture
def engines() -> Iterator[list[EngineBase]]:
    made: list[EngineBase] = []
    yield made
    for engine in made:
        engine.close()
        assert not engine.loop_thread.alive


def failover(made: list[EngineBase], primary: EngineBase, fallback: EngineBase, budget: float) -> FailoverEngine:
    engine = FailoverEngine(primary, fallback, first_token_budget_s=budget)
    made.append(engine)
    engine.loop_thread.submit(engine.start(EngineConfig())).result(30)
    return engine


def chosen(events: list[EngineEvent]) -> list[BackendChosen]:
    return [e for e in events if isinstance(e, BackendChosen)]


def test_a_healthy_primary_answers_and_the_fallback_is_not_asked(engines) -> None:
    primary, fallback = Named("local", [Script(["<think>a</think>", "local answer"])]), Named("gpu-box")
    engine = failover(engines, primary, fallback, budget=5)
    events, _ = run(engine)
    assert chosen(events) == [BackendChosen("r1", "local")]
    assert events[-1] == Finished("r1", "stop", "a", "local answer", events[-1].metrics)
    assert fallback.requests == []


def test_no_first_token_within_the_budget_sends_the_request_to_the_fallback(engines) -> None:
    # First delta at 40 s: the deadline below holds on a loaded machine and still proves the fallback didn't wait.
    slow = Script(["<think>late", " thought</think>", "late answer"], tokens_per_second=1 / 40)
    primary, fallback = Named("local", [slow]), Named("gpu-box", [QUICK])
    engine = failover(engines, primary, fallback, budget=0.5)
    events, elapsed = run(engine)
    assert chosen(events) == [BackendChosen("r1", "gpu-box", "local sent no first token within 0.5 s")]
    final = events[-1]
    assert isinstance(final, Finished) and final.answer_text == "fallback answers"
    assert not any(isinstance(e, AnswerDelta) and "late" in e.text for e in events), "nothing from the primary"
    assert elapsed < 20, "the fallback answered before the primary's first token would have come"


def test_an_error_before_the_first_token_fails_over(engines) -> None:
    broken = Script(["never sent"], fail_after=0, failure=EngineFailure(
        FailureKind.OUT_OF_MEMORY, "Out of memory.", "Lower the context length."))
    engine = failover(engines, Named("local", [broken]), Named("gpu-box", [QUICK]), budget=5)
    events, _ = run(engine)
    assert chosen(events) == [BackendChosen("r1", "gpu-box", "local failed: Out of memory.")]
    assert not any(isinstance(e, EngineErrorEvent) for e in events), "the user sees the fallback's answer"
    assert events[-1].answer_text == "fallback answers"


def test_an_error_after_the_first_token_keeps_the_partial_reply(engines) -> None:
    dies = Script(["<think>one</think>", "partial ", "lost"], fail_after=2)
    fallback = Named("gpu-box", [QUICK])
    engine = failover(engines, Named("local", [dies]), fallback, budget=5)
    events, _ = run(engine)
    assert chosen(events) == [BackendChosen("r1", "local")]
    assert isinstance(events[-2], EngineErrorEvent)
    assert events[-1].reason == "error" and events[-1].answer_text == "partial "
    assert fallback.requests == []


def test_the_reply_so_far_is_the_answering_backends_alone(engines) -> None:
    """Bug caught: after a failover the window read a reply's text from an engine that does not write it (none:
    partial saves stop for every reply on a failover engine, so a crash loses it), or from both backends
    (the primary's start and the fallback's reply saved as one text)."""
    broken = Script(["never sent"], fail_after=0, failure=EngineFailure(
        FailureKind.OUT_OF_MEMORY, "Out of memory.", "Lower the context length."))
    words = [f"w{i} " for i in range(400)]
    fallback = Named("gpu-box", [Script(["<think>fallback thinks</think>", *words], tokens_per_second=800)])
    engine = failover(engines, Named("local", [broken]), fallback, budget=5)
    events: list[EngineEvent] = []
    reply = engine.loop_thread.submit(engine.stream_to(events.append, [{"role": "user", "content": "hi"}],
                                                       SamplingConfig(), "r1"))

    async def until_some_answer() -> tuple[str, str, bool]:
        while (texts := engine.reply_so_far("r1")) is None or not texts.answer_text:
            await asyncio.sleep(0.02)
        return texts.thinking_text, texts.answer_text, texts is fallback.reply_so_far("r1")

    thinking, answer, same = engine.loop_thread.submit(until_some_answer()).result(30)
    assert thinking == "fallback thinks" and answer.startswith("w0 ") and same
    finished = reply.result(30)
    assert finished is not None and finished.answer_text == "".join(words)
    assert engine.reply_so_far("r1") is None, "nothing kept once the reply has ended"


def test_a_primary_that_failed_to_start_leaves_the_fallback_serving(engines) -> None:
    failure = EngineFailure(FailureKind.MODEL_NOT_FOUND, "No such model.", "Pick another.")
    primary = Named("local", start_failure=failure)
    statuses: list[EngineEvent] = []
    engine = FailoverEngine(primary, Named("gpu-box", [QUICK]), first_token_budget_s=5, on_status=statuses.append)
    engines.append(engine)
    ready = engine.loop_thread.submit(engine.start(EngineConfig())).result(30)
    assert ready.model == "scripted-double" and not engine.engine_died()
    assert "local failed (No such model.); answering with gpu-box" in statuses[-1].message
    events, _ = run(engine)
    assert chosen(events) == [BackendChosen("r1", "gpu-box", "local is not running")]


def test_when_neither_starts_the_primary_failure_is_raised(engines) -> None:
    first = EngineFailure(FailureKind.MODEL_NOT_FOUND, "No such model.", "Pick another.")
    second = EngineFailure(FailureKind.UNREACHABLE, "Can't reach it.", "Check the URL.")
    engine = FailoverEngine(Named("local", start_failure=first), Named("gpu-box", start_failure=second))
    engines.append(engine)
    with pytest.raises(EngineFailure, match="No such model"):
        engine.loop_thread.submit(engine.start(EngineConfig())).result(30)


def test_stop_while_waiting_for_the_first_token_does_not_fail_over(engines) -> None:
    slow = Script(["<think>late</think>", "x"], tokens_per_second=1)
    fallback = Named("gpu-box", [QUICK])
    engine = failover(engines, Named("local", [slow]), fallback, budget=0.3)
    events: list[EngineEvent] = []
    future = engine.loop_thread.submit(engine.stream_to(events.append, [{"role": "user", "content": "hi"}],
                                                        SamplingConfig(), "r1"))
    engine.loop_thread.submit(engine.abort("r1")).result(5)
    future.result(10)
    assert events[-1].reason == "abort" and fallback.requests == []


# ---- unreachable remotes: the message names the URL and comes within the budget ---------------

def start_remote(engines: list[EngineBase], url: str, budget: float) -> tuple[EngineFailure, float]:
    engine = RemoteEngine(EndpointProfile(name="gpu-box", base_url=url), "sk-unused", first_token_timeout_s=budget)
    engines.append(engine)
    started = time.monotonic()
    with pytest.raises(EngineFailure) as caught:
        engine.loop_thread.submit(engine.start(EngineConfig())).result(30)
    return caught.value, time.monotonic() - started


def test_a_closed_port_is_named_at_once(engines) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    failure, elapsed = start_remote(engines, url, budget=5)
    assert failure.kind is FailureKind.UNREACHABLE and elapsed < 20  # at once, not after a connect timeout
    assert str(failure).startswith(f"Can't reach {url} (profile “gpu-box”).")
    assert "server is running" in failure.fix


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """Accepts TCP connections (the kernel does) but never reads or answers, like a hung server."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def test_a_server_that_never_answers_times_out_within_the_budget(engines, silent_listener: int) -> None:
    url = f"http://127.0.0.1:{silent_listener}/v1"
    failure, elapsed = start_remote(engines, url, budget=1.0)
    # Within the budget, not the client's own 30 s-or-more timeouts (an upper bound that holds on a loaded machine).
    assert failure.kind is FailureKind.TIMEOUT and 0.9 < elapsed < 20
    assert failure.message == f"{url} (profile “gpu-box”) did not answer within 1 s."


@pytest.fixture
def unroutable_port() -> Iterator[int]:
    """Stands in for a non-routable address: this sandbox answers every outside address through a
    proxy, so a SYN that gets no reply is made here with a listener whose accept queue is full."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(0)
        port = sock.getsockname()[1]
        fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        yield port
        for filler in fillers:
            filler.close()


def test_a_connection_that_never_opens_is_reported_within_the_budget(engines, unroutable_port: int) -> None:
    url = f"http://127.0.0.1:{unroutable_port}/v1"
    failure, elapsed = start_remote(engines, url, budget=1.0)
    assert failure.kind in (FailureKind.TIMEOUT, FailureKind.UNREACHABLE) and elapsed < 20
    assert url in failure.message


# ---- the reverse: a remote primary (real HTTP) that fails, the local engine behind it ---------------

@pytest.fixture
def slow_remote(engines) -> Iterator[tuple[str, str, LocalApiServer]]:
    """A real OpenAI-compatible server on 127.0.0.1 (Nalar's own) in front of a double whose first
    token takes 6 s: the remote side of the connection is real HTTP and the openai client. (Beyond the tests'
    5 s deadlines, which hold on a loaded machine; the server's stop waits for that first token.)"""
    behind = Named("desk", [Script(["<think>late</think>", "late answer"], tokens_per_second=1 / 6)] * 3)
    engines.append(behind)
    behind.loop_thread.submit(behind.start(EngineConfig())).result(10)
    token = new_token()
    server = LocalApiServer(behind, token, port=0)
    url = behind.loop_thread.submit(server.start()).result(10)
    yield url, token, server
    behind.loop_thread.submit(server.stop()).result(60)


def test_a_remote_that_misses_the_budget_falls_back_to_local(engines, slow_remote) -> None:
    url, token, _ = slow_remote
    remote = RemoteEngine(EndpointProfile(name="desk", base_url=url), token, first_token_timeout_s=30)
    engine = failover(engines, remote, Named("local", [QUICK]), budget=1.0)
    events, elapsed = run(engine)
    assert chosen(events) == [BackendChosen("r1", "local", "desk sent no first token within 1 s")]
    assert events[-1].answer_text == "fallback answers" and elapsed < 5


def test_a_remote_that_went_away_falls_back_to_local(engines, slow_remote) -> None:
    url, token, server = slow_remote
    remote = RemoteEngine(EndpointProfile(name="desk", base_url=url), token, first_token_timeout_s=30)
    engine = failover(engines, remote, Named("local", [QUICK]), budget=60)
    server.engine.loop_thread.submit(server.stop()).result(10)
    events, elapsed = run(engine)
    assert chosen(events) == [BackendChosen("r1", "local", f"desk failed: Can't reach {url} (profile “desk”).")]
    assert events[-1].answer_text == "fallback answers" and elapsed < 30  # at once, not after the 60 s budget


def test_stopping_a_remote_reply_ends_it_at_once(engines, slow_remote) -> None:
    url, token, _ = slow_remote
    remote = RemoteEngine(EndpointProfile(name="desk", base_url=url), token, first_token_timeout_s=30)
    engines.append(remote)
    remote.loop_thread.submit(remote.start(EngineConfig())).result(10)
    events: list[EngineEvent] = []
    future = remote.loop_thread.submit(remote.stream_to(events.append, [{"role": "user", "content": "hi"}],
                                                        SamplingConfig(), "r1"))
    started = time.monotonic()
    remote.loop_thread.submit(remote.abort("r1")).result(5)
    finished = future.result(5)
    assert finished is not None and finished.reason == "abort" and time.monotonic() - started < 5  # not 6 s
