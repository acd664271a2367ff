"""The remote client's HTTP, read to a bound: /v1/models' body and each streamed (SSE) event.

The openai client reads a non-streamed body whole and buffers a streamed event until its blank line, with no
limit: a server (or anything answering at its address) that sends an endless model list or one event without
end filled the memory before any check ran. Here the bytes are counted as they arrive, and past the cap the
read ends with the server's bad answer, naming the endpoint and the limit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2  # the openai client's HTTP (a fork of httpx it ships with)

from app.core.tls import tls_context
from app.engine.errors import EngineFailure
from app.engine.remote.answers import bad_answer

MAX_MODELS_BYTES = 1 << 20  # /v1/models: a few KB for any real server's list
MAX_EVENT_BYTES = 1 << 20  # one SSE event (its lines up to the blank one): a few tokens' delta, a few KB at most
EVENT_ENDS = (b"\n\n", b"\r\n\r\n", b"\r\r")


class CappedTransport(httpx2.AsyncBaseTransport):
    """httpx2's own transport (the openai client's), its answers read through ``CappedStream``."""

    def __init__(self) -> None:
        self._inner = httpx2.AsyncHTTPTransport(verify=tls_context())

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        endpoint = str(request.url).split("?")[0]
        streamed = response.headers.get("content-type", "").startswith("text/event-stream")
        if streamed or request.url.path.rstrip("/").endswith("/models"):
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            response.stream = CappedStream(response.stream, endpoint, streamed)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedStream(httpx2.AsyncByteStream):
    """A body passed on chunk by chunk until it passes its cap: the whole body's (a model list), or one event's
    (a stream)."""

    def __init__(self, inner: httpx2.AsyncByteStream, endpoint: str, streamed: bool) -> None:
        self._inner, self.endpoint, self.streamed = inner, endpoint, streamed

    async def __aiter__(self) -> AsyncIterator[bytes]:
        counted, tail = 0, b""  # bytes of the body (or of the event under way); the last bytes, for a split end
        async for chunk in self._inner:
            if not self.streamed:
                counted += len(chunk)
            else:
                seen = tail + chunk
                end = max((seen.rfind(mark) + len(mark) for mark in EVENT_ENDS if mark in seen), default=-1)
                counted = counted + len(chunk) if end < 0 else len(seen) - end
                tail = seen[-3:]
            if counted > (MAX_EVENT_BYTES if self.streamed else MAX_MODELS_BYTES):
                raise self.too_long()
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()

    def too_long(self) -> EngineFailure:
        if self.streamed:
            return bad_answer(self.endpoint, f"a streamed event longer than {MAX_EVENT_BYTES // (1 << 20)} MiB (one "
                                             "event carries a few tokens); the reply was ended there")
        return bad_answer(self.endpoint, f"more than {MAX_MODELS_BYTES // (1 << 20)} MiB (a model list is a few KB); "
                                         "the rest was not read")


def failure_inside(exc: BaseException) -> EngineFailure | None:
    """The cap's failure, where the openai client wrapped it (an APIConnectionError raised from it)."""
    cause: BaseException | None = exc
    for _ in range(8):  # a chain of causes is short; a cycle must not hold the loop
        if cause is None or isinstance(cause, EngineFailure):
            return cause
        cause = cause.__cause__
    return None
