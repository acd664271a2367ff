"""Download a model repository from the Hugging Face hub into Nalar's cache, resumable across restarts.

huggingface_hub does the HTTP: the repo listing (``HfApi.model_info``), each file's metadata
(``get_hf_file_metadata``: HEAD, ETag, size) and the transfer (``http_get`` with a resume offset,
which sends a Range request). We keep each file's partial bytes in our own
``.nalar-partial/<name>.<etag>.incomplete``: the library's own ``hf_hub_download`` deletes a partial
file when a download stops, so it could not resume after Nalar is closed.

Blocking by design: the UI runs :meth:`HubDownload.run` on a worker thread and gets plain
:class:`DownloadProgress` values through a callback. :meth:`HubDownload.cancel` is safe from any
thread and stops the transfer within one network chunk; the partial bytes stay for the next run.
"""

from __future__ import annotations

import fnmatch
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
                 on_progress: ProgressCallback | None = None) -> None:
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
        commit, files = self._list_files()
        placed = self._place(list(files))  # every name checked before anything is written
        self._files_total = len(files)
        self._total = sum(files.values())
        self.target.mkdir(parents=True, exist_ok=True)
        self._done = sum(self._existing_bytes(name, placed[name], size) for name, size in files.items())
        self._run_started = time.monotonic()
        log.info("downloading %s@%s from %s: %d files, %d bytes (%d already here)", self.repo_id, commit[:12],
                 self.endpoint, len(files), self._total, self._done)
        for name, size in files.items():
            self._current = name
            self._fetch(name, placed[name], size, commit)
            self._files_done += 1
            self._report(force=True)
        marker = {"repo_id": self.repo_id, "commit": commit, "endpoint": self.endpoint, "files": files}
        tmp = self.target / (COMPLETE_MARKER + ".tmp")
        tmp.write_text(json.dumps(marker, indent=2))
        tmp.replace(self.target / COMPLETE_MARKER)
        shutil.rmtree(self.target / PARTIAL_DIR, ignore_errors=True)
        return self.target

    def _list_files(self) -> tuple[str, dict[str, int]]:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        try:
            info = HfApi(endpoint=self.endpoint, token=self.token).model_info(
                self.repo_id, revision=self.revision, files_metadata=True)
        except GatedRepoError:
            raise DownloadError(f"{self.repo_id} is gated: accept its licence on the model's hub page, then log in "
                                "with `hf auth login` and retry.") from None
        except RepositoryNotFoundError:
            raise DownloadError(f"{self.repo_id} was not found on {self.endpoint} (or it is private). "
                                "Fix: check the model id, or log in with `hf auth login`.") from None
        except RevisionNotFoundError:
            raise DownloadError(f"{self.repo_id} has no revision {self.revision!r}.") from None
        except HfHubHTTPError as exc:
            raise DownloadError(f"{self.endpoint} answered with an error for {self.repo_id}: "
                                f"{str(exc).splitlines()[0]}. Fix: retry later.") from None
        except Exception as exc:  # httpx's connection and timeout errors, and DNS failures
            raise DownloadError(self._unreachable(exc)) from None
        siblings = info.siblings or []
        files = {s.rfilename: int(s.size or 0) for s in siblings if _wanted(s.rfilename, self.allow, self.ignore)}
        if not any(name.endswith(".safetensors") for name in files) or "config.json" not in files:
            raise DownloadError(f"{self.repo_id} has no config.json and safetensors weights, which vLLM needs. "
                                "Fix: choose a repository that ships safetensors.")
        return str(info.sha or self.revision), files

    def _unreachable(self, exc: BaseException) -> str:
        return (f"Could not reach {self.endpoint} ({type(exc).__name__}: {str(exc)[:200]}). "
                "Fix: check the network connection and retry: the download resumes where it stopped. "
                "Offline, use the embedded model or a local model folder.")

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
        from huggingface_hub import get_hf_file_metadata, hf_hub_url
        from huggingface_hub.errors import HfHubHTTPError
        from huggingface_hub.file_download import http_get
        from huggingface_hub.utils import build_hf_headers

        if final.exists() and final.stat().st_size == size:
            return
        url = hf_hub_url(self.repo_id, name, revision=commit, endpoint=self.endpoint)
        try:
            meta = get_hf_file_metadata(url, token=self.token, endpoint=self.endpoint, retry_on_errors=True)
        except HfHubHTTPError as exc:
            raise DownloadError(f"{self.endpoint} refused {name}: {str(exc).splitlines()[0]}.") from None
        except Exception as exc:
            raise DownloadError(self._unreachable(exc)) from None
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
            raise DownloadError(self._unreachable(exc)) from None
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partial, self._place([name])[name])  # checked again: no part on the way became a link

    # ---- progress ----------------------------------------------------------------------------------

    def _advance(self, count: int) -> None:
        """Called by huggingface_hub before each chunk is written: raising here keeps that chunk out."""
        if self._cancelled.is_set():
            raise DownloadCancelled(self.repo_id)
        self._done += count
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
                                          self._files_done, self._files_total))

    def _bar_class(self) -> type[Any]:
        """A tqdm class huggingface_hub drives; it forwards byte counts to us instead of drawing a bar."""
        from tqdm import tqdm

        download = self

        class ProgressForwarder(tqdm):  # type: ignore[misc]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs["disable"] = True
                super().__init__(*args, **kwargs)

            def update(self, n: float | None = 1) -> bool | None:
                download._advance(int(n or 0))
                return None

        return ProgressForwarder


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
