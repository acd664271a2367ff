"""Download a model repository from the Hugging Face hub into Nalar's cache, resumable across restarts.

huggingface_hub does the HTTP: the repo listing (``HfApi.model_info``), each file's metadata
(``get_hf_file_metadata``: HEAD, ETag, size) and the transfer (``http_get`` with a resume offset,
which sends a Range request). We keep each file's partial bytes in our own
``.nalar-partial/<name>.<etag>.incomplete``: the library's own ``hf_hub_download`` deletes a partial
file when a download stops, so it could not resume after Nalar is closed.

Blocking by design: the UI runs :meth:`HubDownload.run` on a worker thread and gets plain
:class:`DownloadProgress` values through a callback. :meth:`HubDownload.cancel` is safe from any
thread and stops the transfer within a megabyte; the partial bytes stay for the next run.

Each finished file whose listing gives an LFS sha256 is hashed before it takes its place: a mismatch (a
corrupted transfer or a mirror serving other bytes) deletes the file and fails naming it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.models.hub_problems import first_line, hub_problem
from app.core.safe_files import UnsafeName, safe_child
from app.core.settings import paths

log = logging.getLogger(__name__)

COMPLETE_MARKER = "nalar-download.json"
PARTIAL_DIR = ".nalar-partial"
# What vLLM needs to serve a model. Pickled weights (*.bin, *.pt), GGUF copies, the original checkpoint
# folders and Python files (trust_remote_code stays off) are skipped.
DEFAULT_ALLOW = ("*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja")
DEFAULT_IGNORE = ("original/*", "*/original/*")
PROGRESS_INTERVAL_S = 0.1
# huggingface_hub reads a file in chunks of its DOWNLOAD_CHUNK_SIZE (10 MB) and reports each one read, and a
# cancel lands at a report: 10 s on a 1 MB/s line, or the end of a smaller file. Nalar reads a megabyte at a time.
CANCEL_WITHIN_BYTES = 1 << 20


class DownloadError(RuntimeError):
    """The download can't go on; the message names the problem and the fix."""


class DownloadCancelled(Exception):
    """The user cancelled; the partial bytes are kept for the next run."""


@dataclass(frozen=True)
class DownloadProgress:
    repo_id: str
    filename: str  # the file being transferred now
    done_bytes: int  # of the whole repository, including bytes from an earlier run
    total_bytes: int
    bytes_per_s: float  # over this run's transfer only
    eta_s: float | None
    files_done: int
    files_total: int
    file_done_bytes: int = 0  # of the file being transferred now
    file_total_bytes: int = 0

    @property
    def fraction(self) -> float:
        return self.done_bytes / self.total_bytes if self.total_bytes else 0.0


ProgressCallback = Callable[[DownloadProgress], None]


def hub_endpoint() -> str:
    """HF_ENDPOINT read now, not at import: huggingface_hub freezes it into its constants when imported."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def models_dir() -> Path:
    return paths.cache_dir() / "models"


def download_dir(repo_id: str) -> Path:
    """Where a hub model lands: ``<cache>/models/<owner>--<name>``, the hub cache's own naming."""
    return models_dir() / repo_id.replace("/", "--")


def is_complete(folder: Path) -> bool:
    """True when a finished download is there: the marker is written only after every file."""
    try:
        marker = json.loads((folder / COMPLETE_MARKER).read_text())
        return all((folder / name).stat().st_size == size for name, size in marker["files"].items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def partial_bytes(repo_id: str) -> int:
    """Bytes an earlier, unfinished run left (partial files plus files already finished)."""
    folder = download_dir(repo_id)
    if not folder.exists() or is_complete(folder):
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.name != COMPLETE_MARKER)


def _wanted(name: str, allow: tuple[str, ...], ignore: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in allow) and not any(fnmatch.fnmatch(name, p) for p in ignore)


def placed_files(target: Path, names: list[str]) -> dict[str, Path]:
    """Where each listed file goes inside ``target``, or UnsafeName for the first name refused. The listing is
    the server's word: a mirror (HF_ENDPOINT) that lists ``../../.bashrc`` or ``/etc/…`` must not decide where
    Nalar writes. Also refused: a name that is another's folder, and Nalar's own records' names."""
    folders = set()
    for name in names:
        at = name.find("/")
        while at != -1:
            folders.add(name[:at])
            at = name.find("/", at + 1)
    placed = {}
    for name in names:
        if name.split("/", 1)[0] in (PARTIAL_DIR, COMPLETE_MARKER, COMPLETE_MARKER + ".tmp"):
            raise UnsafeName(name, "Nalar keeps its own download records under that name")
        if name in folders:
            raise UnsafeName(name, "the listing names it both as a file and as a folder")
        placed[name] = safe_child(target, name)
    return placed


def _partial_name(filename: str, etag: str) -> str:
    safe_etag = re.sub(r"[^A-Za-z0-9]", "", etag)[:24] or "noetag"
    return f"{filename.replace('/', '--')}.{safe_etag}.incomplete"


class HubDownload:
    """One repository's download. ``run()`` blocks; ``cancel()`` may be called from any thread."""

    def __init__(self, repo_id: str, *, revision: str = "main", endpoint: str | None = None,
                 target: Path | None = None, token: str | bool | None = None,
                 allow: tuple[str, ...] = DEFAULT_ALLOW, ignore: tuple[str, ...] = DEFAULT_IGNORE,
                 only: tuple[str, ...] | None = None, on_progress: ProgressCallback | None = None) -> None:
        """``only``: exactly these files of the repo (one quantization's FileSet), instead of allow/ignore."""
        self.repo_id = repo_id
        self.revision = revision
        self.endpoint = (endpoint or hub_endpoint()).rstrip("/")
        self.target = target or download_dir(repo_id)
        self.token = token
        self.allow, self.ignore = allow, ignore
        self.on_progress = on_progress
        self._cancelled = threading.Event()
        self._done = 0
        self._total = 0
        self._run_bytes = 0
        self._run_started = 0.0
        self._last_report = 0.0
        self._current = ""
        self._files_done = 0
        self._files_total = 0
        self._file_done = 0
        self._file_total = 0
        self.only = only
        self._sha256: dict[str, str] = {}  # the listing's LFS hashes
        self._listing: tuple[str, dict[str, int]] | None = None

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    # ---- the transfer ----------------------------------------------------------------------------

    def run(self) -> Path:
        """Download what is missing and return the model folder. Raises DownloadError or DownloadCancelled."""
        from huggingface_hub import constants

        if is_complete(self.target):
            return self.target
        if constants.HF_HUB_OFFLINE:
            raise DownloadError("Hugging Face downloads are switched off (HF_HUB_OFFLINE is set). "
                                "Fix: unset HF_HUB_OFFLINE, or use the embedded model or a local folder.")
        commit, files = self.listing()
        placed = self._place(list(files))  # every name checked before anything is written
        self._files_total = len(files)
        self._total = sum(files.values())
        self.target.mkdir(parents=True, exist_ok=True)
        self._done = sum(self._existing_bytes(name, placed[name], size) for name, size in files.items())
        self._run_started = time.monotonic()
        log.info("downloading %s@%s from %s: %d files, %d bytes (%d already here)", self.repo_id, commit[:12],
                 self.endpoint, len(files), self._total, self._done)
        for name, size in files.items():
            self._current, self._file_done, self._file_total = name, 0, size
            self._fetch(name, placed[name], size, commit)
            self._files_done += 1
            self._report(force=True)
        marker = {"repo_id": self.repo_id, "commit": commit, "endpoint": self.endpoint, "files": files}
        tmp = self.target / (COMPLETE_MARKER + ".tmp")
        tmp.write_text(json.dumps(marker, indent=2))
        tmp.replace(self.target / COMPLETE_MARKER)
        shutil.rmtree(self.target / PARTIAL_DIR, ignore_errors=True)
        return self.target

    def listing(self) -> tuple[str, dict[str, int]]:
        """The commit and the files to fetch with their sizes (one request, then kept). Raises DownloadError."""
        if self._listing is None:
            self._listing = self._list_files()
        return self._listing

    def bytes_here(self) -> int:
        """Bytes of the listed files already in the target (finished files and partial ones)."""
        _commit, files = self.listing()
        placed = self._place(list(files))
        return sum(self._existing_bytes(name, placed[name], size) for name, size in files.items())

    def _list_files(self) -> tuple[str, dict[str, int]]:
        from huggingface_hub import HfApi

        try:
            info = HfApi(endpoint=self.endpoint, token=self.token).model_info(
                self.repo_id, revision=self.revision, files_metadata=True)
        except Exception as exc:
            raise _listing_error(exc, self.endpoint, self.repo_id, self.revision) from None
        siblings = info.siblings or []
        chosen = [s for s in siblings if (s.rfilename in self.only if self.only is not None
                                          else _wanted(s.rfilename, self.allow, self.ignore))]
        files = {s.rfilename: int(s.size or 0) for s in chosen}
        self._sha256 = {s.rfilename: str(s.lfs.sha256) for s in chosen if s.lfs is not None and s.lfs.sha256}
        configs = [name for name in files if name == "config.json" or name.endswith("/config.json")]
        if not any(name.endswith(".safetensors") for name in files) or not configs:
            raise DownloadError(f"{self.repo_id} has no config.json and safetensors weights, which vLLM needs. "
                                "Fix: choose a repository that ships safetensors.")
        return str(info.sha or self.revision), files

    def _place(self, names: list[str]) -> dict[str, Path]:
        try:
            return placed_files(self.target, names)
        except UnsafeName as exc:
            raise DownloadError(f"{self.endpoint} listed a file Nalar will not write for {self.repo_id}: {exc}. "
                                "Nothing was written. Fix: download from a hub you trust (unset HF_ENDPOINT for "
                                "huggingface.co).") from None

    def _existing_bytes(self, name: str, final: Path, size: int) -> int:
        if final.exists() and final.stat().st_size == size:
            return size
        partials = (self.target / PARTIAL_DIR).glob(f"{name.replace('/', '--')}.*.incomplete")
        return sum(p.stat().st_size for p in partials)

    def _fetch(self, name: str, final: Path, size: int, commit: str) -> None:
        from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
        from huggingface_hub.file_download import http_get
        from huggingface_hub.utils import build_hf_headers

        constants.DOWNLOAD_CHUNK_SIZE = CANCEL_WITHIN_BYTES  # read at each http_get; only Nalar downloads here
        if final.exists() and final.stat().st_size == size:
            return
        url = hf_hub_url(self.repo_id, name, revision=commit, endpoint=self.endpoint)
        try:
            meta = get_hf_file_metadata(url, token=self.token, endpoint=self.endpoint, retry_on_errors=True)
        except Exception as exc:
            raise _file_error(exc, self.endpoint, self.repo_id, name) from None
        expected = meta.size if meta.size is not None else size
        partial_dir = self.target / PARTIAL_DIR
        partial_dir.mkdir(parents=True, exist_ok=True)
        partial = partial_dir / _partial_name(name, meta.etag or commit)
        # A partial file for another ETag is a different version of the file: it can't be resumed.
        for stale in partial_dir.glob(f"{name.replace('/', '--')}.*.incomplete"):
            if stale != partial:
                self._done -= stale.stat().st_size
                stale.unlink()
        resume = partial.stat().st_size if partial.exists() else 0
        if resume > expected:
            self._done -= resume
            partial.unlink()
            resume = 0
        if resume:
            log.info("resuming %s at byte %d of %d", name, resume, expected)
        self._file_done, self._file_total = resume, expected
        try:
            with partial.open("ab") as handle:
                http_get(meta.location, handle, resume_size=resume, expected_size=expected,
                         headers=build_hf_headers(token=self.token), displayed_filename=name,
                         tqdm_class=self._bar_class())
        except DownloadCancelled:
            log.info("download of %s cancelled at %s of %s", self.repo_id, self._done, self._total)
            raise
        except OSError as exc:
            raise DownloadError(f"Writing {partial} failed: {exc}. Fix: free disk space in {self.target.parent} "
                                "and retry.") from None
        except Exception as exc:
            raise DownloadError(_unreachable(self.endpoint, exc)) from None
        self._check_sha256(name, partial)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partial, self._place([name])[name])  # checked again: no part on the way became a link

    def _check_sha256(self, name: str, partial: Path) -> None:
        """The hub's LFS sha256 against the bytes received; a mismatch deletes them and fails naming the file."""
        expected, received = self._sha256.get(name), ""
        if expected and (received := sha256_of(partial)) != expected.lower():
            self._done -= partial.stat().st_size
            partial.unlink()
            raise DownloadError(f"{name} of {self.repo_id} does not match the hub's sha256 ({expected[:12]}…; "
                                f"received {received[:12]}…): the file was deleted. Fix: retry; if it "
                                f"happens again, {self.endpoint} serves other bytes than it lists.")

    # ---- progress ----------------------------------------------------------------------------------

    def _advance(self, count: int) -> None:
        """Called by huggingface_hub before each chunk is written: raising here keeps that chunk out."""
        if self._cancelled.is_set():
            raise DownloadCancelled(self.repo_id)
        self._done += count
        self._file_done += count
        self._run_bytes += count
        self._report()

    def _report(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.on_progress is None or (not force and now - self._last_report < PROGRESS_INTERVAL_S):
            return
        self._last_report = now
        elapsed = max(now - self._run_started, 1e-6)
        speed = self._run_bytes / elapsed
        left = max(self._total - self._done, 0)
        eta = left / speed if speed > 0 else None
        self.on_progress(DownloadProgress(self.repo_id, self._current, self._done, self._total, speed, eta,
                                          self._files_done, self._files_total, self._file_done, self._file_total))

    def _bar_class(self) -> type[Any]:
        return progress_forwarder(self._advance)


def progress_forwarder(advance: Callable[[int], None]) -> type[Any]:
    """A tqdm class huggingface_hub drives; it forwards byte counts to ``advance`` instead of drawing a bar."""
    from tqdm import tqdm

    class ProgressForwarder(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            advance(int(n or 0))
            return None

    return ProgressForwarder


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _unreachable(endpoint: str, exc: BaseException) -> str:
    return (f"Could not reach {endpoint} ({type(exc).__name__}: {str(exc)[:200]}). "
            "Fix: check the network connection and retry: the download resumes where it stopped. "
            "Offline, use the embedded model or a local model folder.")


def _listing_error(exc: BaseException, endpoint: str, repo_id: str, revision: str) -> DownloadError:
    problem = hub_problem(exc)
    if problem == "gated":
        return DownloadError(f"{repo_id} is gated or private on {endpoint}: accept its licence on the model's hub "
                             "page, then log in with `hf auth login` and retry.")
    if problem == "not_found":
        return DownloadError(f"{repo_id} was not found on {endpoint} (or it is private). "
                             "Fix: check the model id, or log in with `hf auth login`.")
    if problem == "no_revision":
        return DownloadError(f"{repo_id} has no revision {revision!r}.")
    if problem == "http":
        return DownloadError(f"{endpoint} answered with an error for {repo_id}: {first_line(exc)}. "
                             "Fix: retry later.")
    return DownloadError(_unreachable(endpoint, exc))


def _file_error(exc: BaseException, endpoint: str, repo_id: str, name: str) -> DownloadError:
    problem = hub_problem(exc)
    if problem == "gated":
        return DownloadError(f"{repo_id} is gated or private: {endpoint} refused {name} without a login. Fix: "
                             "accept its licence on the model's hub page, log in with `hf auth login` and retry.")
    if problem == "unreachable":
        return DownloadError(_unreachable(endpoint, exc))
    return DownloadError(f"{endpoint} refused {name}: {first_line(exc)}.")


def format_bytes(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(count) < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} GB"


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "time left unknown"
    seconds = int(seconds + 0.5)
    if seconds < 60:
        return f"{seconds} s left"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s left"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min left"


def describe(progress: DownloadProgress) -> str:
    """"1.2 GB of 4.5 GB · 35.0 MB/s · 1 min 34 s left", for the progress bar's label."""
    return (f"{format_bytes(progress.done_bytes)} of {format_bytes(progress.total_bytes)} · "
            f"{format_bytes(progress.bytes_per_s)}/s · {format_eta(progress.eta_s)}")


def check_reachable(endpoint: str | None = None, timeout: float = 5.0) -> str | None:
    """None when the hub answers at all, else why not (offline, DNS, refused): the dialog shows it."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set, so Nalar does not download models."
    endpoint = (endpoint or hub_endpoint()).rstrip("/")
    try:
        get_session().head(endpoint, timeout=timeout)
    except Exception as exc:
        return f"{endpoint} can't be reached ({type(exc).__name__})."
    return None
