"""One TLS context for the HTTP clients Nalar opens: the system's trust store, as the openai client reads it.

Each httpx client built its own and read the CA bundle again (30 to 50 ms of CPU: every remote connect, its
/tokenize probe and every MCP connection paid it). A context serves any number of connections, on any thread.
The /tokenize probe had certifi's bundle while the chat client had the system's, so a server behind a CA that
only the system trusts answered one and failed the other; both now trust the same roots.
"""

from __future__ import annotations

import functools
import ssl


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx2's default (SSL_CERT_FILE / SSL_CERT_DIR if set, else the system's roots), built once per process."""
    import httpx2  # the openai client's HTTP; its import is paid by whoever opens a client anyway

    return httpx2.create_ssl_context()
