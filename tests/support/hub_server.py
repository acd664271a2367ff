"""A small Hugging Face hub on 127.0.0.1 for download tests: the endpoints huggingface_hub calls, real HTTP.

- ``GET /api/models/<repo>[/revision/<rev>]``: the repo's info with its files and sizes (``siblings``).
- ``HEAD /<repo>/resolve/<rev>/<file>``: ``ETag``, ``X-Repo-Commit``, ``Content-Length``.
- ``GET /<repo>/resolve/<rev>/<file>``: the bytes, honouring ``Range: bytes=N-`` with a 206.

Every GET of a file is logged with its Range, so tests can check that a resumed download asked
only for the remainder. ``throttle_bytes_per_s`` slows the body down like a real network.

A hostile mirror: ``HubRepo.add_listed`` lists a name exactly as given (``../../x``, ``/abs/x``, a NUL) and
serves its bytes at any path that ends in the name's last part, since a client's URL handling folds ``..``
away and a hostile server answers whatever it is asked.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CHUNK = 64 * 1024
HOLD_LIMIT_S = 300  # a held body goes on after this even unreleased: a failed test must not leave a thread waiting


@dataclass
class FileRequest:
    filename: str
    range_start: int  # 0 without a Range header
    status: int
    bytes_sent: int = 0


@dataclass
class HubRepo:
    repo_id: str
    folder: Path
    files: dict[str, Path] = field(default_factory=dict)
    etags: dict[str, str] = field(default_factory=dict)
    anywhere: set[str] = field(default_factory=set)  # names served at any path ending in their last part

    @classmethod
    def from_folder(cls, repo_id: str, folder: Path) -> HubRepo:
        files = {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()}
        # The hub's ETag of an LFS file is its sha256; a cheap stand-in does here (size and name).
        etags = {name: hashlib.sha256(f"{name}:{p.stat().st_size}".encode()).hexdigest() for name, p in files.items()}
        return cls(repo_id, folder, files, etags)

    def add_listed(self, name: str, source: Path) -> None:
        """List ``name`` as given, with ``source``'s bytes: what a hostile mirror can say."""
        self.files[name] = source
        self.etags[name] = hashlib.sha256(f"listed:{name}".encode("utf-8", "surrogatepass")).hexdigest()
        self.anywhere.add(name)

    def listed_at(self, path: str) -> str | None:
        tail = path.rsplit("/", 1)[-1]
        return next((name for name in sorted(self.anywhere) if name.rsplit("/", 1)[-1] == tail), None)


class LocalHub:
    def __init__(self, repos: list[HubRepo]) -> None:
        self.repos = {repo.repo_id: repo for repo in repos}
        self.requests: list[FileRequest] = []
        self.throttle_bytes_per_s: float | None = None
        # A body stops once this many bytes of its file are sent, until ``release`` is set: a test can then act on
        # a download that is surely under way (``held`` says the hub got there), whatever the machine's speed.
        self.hold_at_bytes: int | None = None
        self.held = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet test output
                pass

            def do_GET(self) -> None:
                hub.handle(self, head=False)

            def do_HEAD(self) -> None:
                hub.handle(self, head=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="local-hub", daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> LocalHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def file_requests(self, filename: str) -> list[FileRequest]:
        with self.lock:
            return [r for r in self.requests if r.filename == filename]

    # ---- routing ----------------------------------------------------------------------------------

    def handle(self, request: BaseHTTPRequestHandler, head: bool) -> None:
        path = request.path.split("?", 1)[0]
        api = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
        if api and not head:
            return self.model_info(request, api.group(1))
        resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        filename = unquote(resolve.group(3)) if resolve else ""
        if resolve and filename in getattr(self.repos.get(resolve.group(1)), "files", {}):
            return self.resolve(request, resolve.group(1), filename, head)
        for repo in self.repos.values():
            if (listed := repo.listed_at(unquote(path))) is not None:
                return self.resolve(request, repo.repo_id, listed, head)
        if resolve:
            return self.resolve(request, resolve.group(1), filename, head)
        if path == "/":
            return self.reply(request, 200, b"local hub", head=head)
        return self.reply(request, 404, b'{"error": "not found"}', head=head)

    def reply(self, request: BaseHTTPRequestHandler, status: int, body: bytes, *, head: bool = False,
              headers: dict[str, str] | None = None) -> None:
        request.send_response(status)
        for key, value in (headers or {}).items():
            request.send_header(key, value)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        if not head:
            request.wfile.write(body)

    def model_info(self, request: BaseHTTPRequestHandler, repo_id: str) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:  # the hub's answer for a missing or private repo
            return self.reply(request, 401, b'{"error": "Repository not found"}',
                              headers={"X-Error-Code": "RepoNotFound", "Content-Type": "application/json"})
        siblings = [{"rfilename": name, "size": p.stat().st_size} for name, p in repo.files.items()]
        body = json.dumps({"id": repo_id, "modelId": repo_id, "sha": COMMIT, "private": False,
                           "siblings": siblings}).encode()
        self.reply(request, 200, body, headers={"Content-Type": "application/json"})

    def resolve(self, request: BaseHTTPRequestHandler, repo_id: str, filename: str, head: bool) -> None:
        repo = self.repos.get(repo_id)
        source = repo.files.get(filename) if repo else None
        if repo is None or source is None:
            return self.reply(request, 404, b"Entry not found", head=head,
                              headers={"X-Error-Code": "EntryNotFound"})
        size = source.stat().st_size
        headers = {"ETag": f'"{repo.etags[filename]}"', "X-Repo-Commit": COMMIT, "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream"}
        if head:
            return self._head(request, headers, size)
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-", request.headers.get("Range", ""))
        if match:
            start = int(match.group(1))
        if start >= size and size:
            return self.reply(request, 416, b"", headers={"Content-Range": f"bytes */{size}"})
        status = 206 if match else 200
        record = FileRequest(filename, start, status)
        with self.lock:
            self.requests.append(record)
        request.send_response(status)
        for key, value in headers.items():
            request.send_header(key, value)
        request.send_header("Content-Length", str(size - start))
        if match:
            request.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        request.end_headers()
        try:
            with source.open("rb") as handle:
                handle.seek(start)
                while block := handle.read(CHUNK):
                    request.wfile.write(block)
                    record.bytes_sent += len(block)
                    if self.throttle_bytes_per_s:
                        time.sleep(len(block) / self.throttle_bytes_per_s)  # ok-sleep: simulates a slow network
                    if self.hold_at_bytes is not None and start + record.bytes_sent >= self.hold_at_bytes:
                        self.held.set()
                        self.release.wait(HOLD_LIMIT_S)
        except (BrokenPipeError, ConnectionResetError):
            request.close_connection = True  # the client cancelled

    def _head(self, request: BaseHTTPRequestHandler, headers: dict[str, str], size: int) -> None:
        request.send_response(200)
        for key, value in headers.items():
            request.send_header(key, value)
        request.send_header("Content-Length", str(size))
        request.end_headers()
