"""A small Hugging Face hub on 127.0.0.1 for download and search tests: the endpoints huggingface_hub calls, real HTTP.

- ``GET /api/models?search=&sort=&limit=&filter=&full=&expand=…``: search, as ``HfApi.list_models`` asks it
  (sorted descending, ``filter`` matched against tags, pages of ``page_size`` linked by a ``Link: rel="next"``).
- ``GET /api/models/<repo>[/revision/<rev>]``: the repo's info with its files and sizes (``siblings``), each
  LFS file's ``lfs.sha256`` when ``blobs`` (files_metadata) is asked; ``safetensors`` parameters, ``gated``,
  ``cardData.license``.
- ``HEAD /<repo>/resolve/<rev>/<file>``: ``ETag``, ``X-Repo-Commit``, ``Content-Length``.
- ``GET /<repo>/resolve/<rev>/<file>``: the bytes, honouring ``Range: bytes=N-`` with a 206.

A gated repo (``gated="manual"``) lists its metadata to anyone but answers its files with 401 ``GatedRepo``,
as the hub does without a token. ``listed_sizes`` and ``listed_sha256`` make the listing say other sizes or
hashes than the bytes served: a 14 GB model planned from a few bytes, or a corrupted mirror.

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
from urllib.parse import parse_qs, unquote, urlencode

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
    downloads: int = 0
    likes: int = 0
    trending: float = 0.0
    tags: tuple[str, ...] = ("text-generation", "safetensors")
    gated: bool | str = False  # "manual" or "auto": files need a token
    license: str | None = "apache-2.0"
    last_modified: str = "2025-05-01T12:00:00.000Z"
    parameters: dict[str, int] = field(default_factory=dict)  # the hub's safetensors.parameters, by dtype
    listed_sizes: dict[str, int] = field(default_factory=dict)  # sizes the listing claims instead of the real ones
    listed_sha256: dict[str, str] = field(default_factory=dict)  # LFS hashes the listing claims instead
    _sha256: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_files(cls, repo_id: str, folder: Path, files: dict[str, bytes], **meta: object) -> HubRepo:
        """A repo made of these bytes, written under ``folder``; ``meta``: the listing's other fields."""
        for name, data in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
        repo = cls.from_folder(repo_id, folder)
        for key, value in meta.items():
            setattr(repo, key, value)
        return repo

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

    def size(self, name: str) -> int:
        return self.listed_sizes.get(name, self.files[name].stat().st_size)

    def lfs_sha256(self, name: str) -> str:
        if name in self.listed_sha256:
            return self.listed_sha256[name]
        if name not in self._sha256:
            digest = hashlib.sha256()
            with self.files[name].open("rb") as handle:
                while block := handle.read(1 << 20):
                    digest.update(block)
            self._sha256[name] = digest.hexdigest()
        return self._sha256[name]

    def is_lfs(self, name: str) -> bool:
        return name.endswith((".safetensors", ".gguf", ".bin")) and name not in self.anywhere

    def sibling(self, name: str, blobs: bool) -> dict[str, object]:
        entry: dict[str, object] = {"rfilename": name}
        if blobs:
            entry["size"] = self.size(name)
            entry["blobId"] = self.etags[name][:40]
            if self.is_lfs(name):
                entry["lfs"] = {"size": self.size(name), "sha256": self.lfs_sha256(name), "pointerSize": 134}
        else:
            entry["size"] = self.size(name)  # the older listing kept sizes too; download tests read them
        return entry

    def summary(self, fields: set[str] | None) -> dict[str, object]:
        """The listing's fields for this repo: all of them with ``fields`` None (``full``), else only those."""
        every: dict[str, object] = {
            "id": self.repo_id, "modelId": self.repo_id, "author": self.repo_id.split("/")[0], "sha": COMMIT,
            "private": False, "gated": self.gated, "downloads": self.downloads, "likes": self.likes,
            "trendingScore": self.trending, "lastModified": self.last_modified, "tags": list(self.tags),
            "pipeline_tag": "text-generation" if "text-generation" in self.tags else None,
            "library_name": "transformers",
            "cardData": {"license": self.license} if self.license else {},
            "siblings": [{"rfilename": name} for name in self.files],
        }
        if self.parameters:
            every["safetensors"] = {"parameters": dict(self.parameters), "total": sum(self.parameters.values())}
        config = self.files.get("config.json")
        if config is not None and config.exists():
            try:
                loaded = json.loads(config.read_text())
                every["config"] = {key: loaded[key] for key in ("architectures", "model_type", "quantization_config")
                                   if key in loaded}
            except ValueError:
                pass
        if fields is None:
            return every
        return {key: value for key, value in every.items() if key in fields | {"id", "_id"}}

    def listed_at(self, path: str) -> str | None:
        tail = path.rsplit("/", 1)[-1]
        return next((name for name in sorted(self.anywhere) if name.rsplit("/", 1)[-1] == tail), None)


class LocalHub:
    def __init__(self, repos: list[HubRepo]) -> None:
        self.repos = {repo.repo_id: repo for repo in repos}
        self.requests: list[FileRequest] = []
        self.throttle_bytes_per_s: float | None = None
        self.page_size = 1000  # the hub's page of search results; tests lower it to see the Link header followed
        self.searches: list[dict[str, list[str]]] = []  # each /api/models query as parsed, for tests to check
        # A body stops once this many bytes of its file are sent, until ``release`` is set: a test can then act on
        # a download that is surely under way (``held`` says the hub got there), whatever the machine's speed.
        self.hold_at_bytes: int | None = None
        self.held = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: with Nagle on, the body waits for the client's delayed ACK
            # (40 ms a request here), a stall no real hub has.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: object) -> None:  # quiet test output
                pass

            def do_GET(self) -> None:
                hub.handle(self, head=False)

            def do_HEAD(self) -> None:
                hub.handle(self, head=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # Polled every 20 ms, not socketserver's 0.5 s: shutdown() waits for the next poll, so every test that
        # started a hub waited half a second for it.
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       name="local-hub", daemon=True)

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
        path, _, query = request.path.partition("?")
        if path == "/api/models" and not head:
            return self.search(request, parse_qs(query))
        api = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
        if api and not head:
            return self.model_info(request, api.group(1), "blobs" in parse_qs(query))
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

    def search(self, request: BaseHTTPRequestHandler, query: dict[str, list[str]]) -> None:
        """``/api/models``: what ``list_models`` sends (search, sort, limit, filter, full, expand, cardData,
        config) and a ``cursor`` of ours in the next page's link."""
        with self.lock:
            self.searches.append(query)
        words = query.get("search", [""])[0].lower()
        wanted = query.get("filter", [])
        found = [repo for repo in self.repos.values() if words in repo.repo_id.lower()
                 and all(tag in repo.tags or tag == repo.repo_id.split("/")[0] for tag in wanted)]
        key = query.get("sort", ["downloads"])[0]
        order = {"downloads": lambda r: r.downloads, "likes": lambda r: r.likes,
                 "trendingScore": lambda r: r.trending, "lastModified": lambda r: r.last_modified}
        found.sort(key=order.get(key, order["downloads"]), reverse=True)
        start = int(query.get("cursor", ["0"])[0])
        limit = int(query.get("limit", ["1000000"])[0])
        page = found[start:start + min(limit, self.page_size)]
        expand = set(query.get("expand", []))
        fields: set[str] | None
        if query.get("full", [""])[0].lower() == "true":
            fields = None
        else:
            fields = expand or {"downloads", "likes", "lastModified", "tags", "pipeline_tag", "private", "gated"}
            if query.get("cardData", [""])[0].lower() == "true":
                fields = fields | {"cardData"}
            if query.get("config", [""])[0].lower() == "true":
                fields = fields | {"config"}
        body = json.dumps([repo.summary(fields) for repo in page]).encode()
        headers = {"Content-Type": "application/json"}
        end = start + len(page)
        if page and end < len(found) and end < limit:
            rest = {**query, "cursor": [str(end)]}
            headers["Link"] = f'<{self.endpoint}/api/models?{urlencode(rest, doseq=True)}>; rel="next"'
        self.reply(request, 200, body, headers=headers)

    def model_info(self, request: BaseHTTPRequestHandler, repo_id: str, blobs: bool = False) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:  # the hub's answer for a missing or private repo
            return self.reply(request, 401, b'{"error": "Repository not found"}',
                              headers={"X-Error-Code": "RepoNotFound", "Content-Type": "application/json"})
        info = repo.summary(None)
        info["siblings"] = [repo.sibling(name, blobs) for name in repo.files]
        self.reply(request, 200, json.dumps(info).encode(), headers={"Content-Type": "application/json"})

    def resolve(self, request: BaseHTTPRequestHandler, repo_id: str, filename: str, head: bool) -> None:
        repo = self.repos.get(repo_id)
        source = repo.files.get(filename) if repo else None
        if repo is None or source is None:
            return self.reply(request, 404, b"Entry not found", head=head,
                              headers={"X-Error-Code": "EntryNotFound"})
        if repo.gated:  # no token in tests: the hub's answer to a gated repo's file
            return self.reply(request, 401, b"Access to this model is restricted", head=head,
                              headers={"X-Error-Code": "GatedRepo", "X-Error-Message": "Access is restricted"})
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
