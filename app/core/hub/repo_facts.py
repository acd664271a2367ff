"""What a verdict needs from the hub, and nothing else: the file listing with sizes and LFS hashes
(``model_info(files_metadata=True)``), each model folder's ``config.json``, and the safetensors index's
total where the listing gave no sizes. Cached on disk by repo and commit: a commit's files never change.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.core.hub.file_sets import RepoFile, folder_of, weight_folders
from app.core.hub.search import hub_error
from app.core.settings import paths

log = logging.getLogger(__name__)

REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
COMMIT = re.compile(r"[0-9a-f]{40}")
CONFIG_LIMIT = 4 << 20  # a config.json or index larger than this is no model's
INFO_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class RepoFacts:
    repo_id: str
    commit: str
    files: tuple[RepoFile, ...]
    configs: dict[str, dict[str, Any]]  # config.json by folder, "" for the top
    index_totals: dict[str, int]  # the safetensors index's total_size by folder, where the listing had no sizes

    def to_json(self) -> str:
        return json.dumps({"repo_id": self.repo_id, "commit": self.commit, "files": [asdict(f) for f in self.files],
                           "configs": self.configs, "index_totals": self.index_totals})

    @classmethod
    def from_json(cls, text: str) -> RepoFacts:
        raw = json.loads(text)
        files = tuple(RepoFile(str(f["name"]), int(f["size"]), f.get("sha256")) for f in raw["files"])
        return cls(str(raw["repo_id"]), str(raw["commit"]), files, dict(raw["configs"]),
                   {str(k): int(v) for k, v in raw["index_totals"].items()})


class VerdictCache:
    """config.json and weight sizes per (repo, commit), on disk under the data dir: a verdict for a new budget
    needs no network, and the last commit seen of a repo answers when the hub can't be reached."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or paths.data_dir() / "hub-facts"

    def _file(self, repo_id: str, name: str) -> Path | None:
        if not REPO_ID.fullmatch(repo_id) or ".." in repo_id:
            return None  # a name from outside that is not a hub id never becomes a path
        return self.folder / repo_id.replace("/", "--") / f"{name}.json"

    def get(self, repo_id: str, commit: str) -> RepoFacts | None:
        path = self._file(repo_id, commit) if COMMIT.fullmatch(commit) else None
        return self._read(path)

    def latest(self, repo_id: str) -> RepoFacts | None:
        return self._read(self._file(repo_id, "latest"))

    def put(self, facts: RepoFacts) -> None:
        path = self._file(facts.repo_id, facts.commit) if COMMIT.fullmatch(facts.commit) else None
        latest = self._file(facts.repo_id, "latest")
        if path is None or latest is None:
            return
        text = facts.to_json()
        paths.write_private_text(path, text)
        paths.write_private_text(latest, text)

    def _read(self, path: Path | None) -> RepoFacts | None:
        if path is None or not path.is_file():
            return None
        try:
            return RepoFacts.from_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring the broken hub cache file %s (%s)", path, exc)
            return None


def fetch_facts(repo_id: str, endpoint: str, cache: VerdictCache) -> RepoFacts:
    """The repo's listing (one request), then its config.json files unless this commit is cached."""
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=endpoint).model_info(repo_id, files_metadata=True, timeout=INFO_TIMEOUT_S)
    except Exception as exc:
        raise hub_error(exc, endpoint, repo_id) from None
    commit = str(info.sha or "")
    cached = cache.get(repo_id, commit)
    if cached is not None:
        return cached
    files = tuple(RepoFile(s.rfilename, int(s.size or (s.lfs.size if s.lfs else 0) or 0),
                           str(s.lfs.sha256) if s.lfs else None) for s in info.siblings or [])
    names = {f.name for f in files}
    configs: dict[str, dict[str, Any]] = {}
    totals: dict[str, int] = {}
    revision = commit or "main"
    for folder in weight_folders(files) or [""]:
        prefix = f"{folder}/" if folder else ""
        if prefix + "config.json" in names:
            configs[folder] = fetch_json(repo_id, prefix + "config.json", revision, endpoint)
        index = prefix + "model.safetensors.index.json"
        weights = [f for f in files if folder_of(f.name) == folder and f.name.endswith(".safetensors")]
        if index in names and not all(f.size for f in weights):
            total = fetch_json(repo_id, index, revision, endpoint).get("metadata", {}).get("total_size")
            if isinstance(total, int):
                totals[folder] = total
    facts = RepoFacts(repo_id, commit, files, configs, totals)
    cache.put(facts)
    return facts


def fetch_json(repo_id: str, name: str, revision: str, endpoint: str) -> dict[str, Any]:
    """One small JSON file of the repo, read into memory (never into the HF cache)."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    url = hf_hub_url(repo_id, name, revision=revision, endpoint=endpoint)
    try:
        response = get_session().get(url, headers=build_hf_headers(), timeout=INFO_TIMEOUT_S, follow_redirects=True)
        hf_raise_for_status(response)
    except Exception as exc:
        raise hub_error(exc, endpoint, repo_id) from None
    if len(response.content) > CONFIG_LIMIT:
        raise RuntimeError(f"{repo_id}'s {name} is {len(response.content):,} bytes: not a model's. Nalar skips it.")
    try:
        loaded = json.loads(response.content)
    except ValueError as exc:
        raise RuntimeError(f"{repo_id}'s {name} is not JSON ({exc}). Fix: pick another repo.") from None
    if not isinstance(loaded, dict):
        raise RuntimeError(f"{repo_id}'s {name} is not a JSON object. Fix: pick another repo.")
    return loaded
