"""httpx and the openai client for the tests' servers on 127.0.0.1, all on one TLS context.

``httpx.post`` and friends build a client per call, and each client a TLS context that reads the CA bundle
again: 30 to 50 ms of CPU for a plain-HTTP request to 127.0.0.1, about 180 times in the fast tests. These
are the same calls with the context made once; everything else (no shared connections, the clients'
defaults) is as before.
"""

from __future__ import annotations

import functools
from typing import Any

import httpx
import openai

from app.core.tls import tls_context

TLS = tls_context()  # the app's own, built once a process

get = functools.partial(httpx.get, verify=TLS)
post = functools.partial(httpx.post, verify=TLS)
request = functools.partial(httpx.request, verify=TLS)
stream = functools.partial(httpx.stream, verify=TLS)
Client = functools.partial(httpx.Client, verify=TLS)


def openai_client(**options: Any) -> openai.OpenAI:
    """The official client with its own defaults (timeouts, retries, connection limits) and this context."""
    return openai.OpenAI(http_client=openai.DefaultHttpxClient(verify=TLS), **options)
