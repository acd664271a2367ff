"""One answer to "is this a local model folder, and can vLLM load it": every caller asks here.

A model setting is a local folder when it is an absolute path, starts with "." or "~", or exists;
anything else is a Hugging Face id. A folder is a model folder when it holds a readable config.json
(and, where weights are checked, safetensors files, the only format Nalar loads).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FolderProblem:
    """What is wrong with a model folder, and what to do about it."""

    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.message} {self.fix}"


def looks_local(model: str) -> bool:
    """True for a path on this machine; False for a Hugging Face id (and for "", the embedded model)."""
    if not model:
        return False
    path = Path(model).expanduser()
    return path.is_absolute() or model.startswith((".", "~")) or path.exists()


def folder_problem(folder: Path, *, need_weights: bool = False) -> FolderProblem | None:
    """None when ``folder`` is a model folder vLLM can load, else the problem, named with its fix."""
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        return FolderProblem(f"{folder} {what}, so it is not a model folder.",
                             "Choose an existing model folder in Settings, or clear it to use the embedded model.")
    config = folder / "config.json"
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return FolderProblem(f"{folder} has no config.json, so it is not a model folder.",
                             "Choose the folder that holds config.json and the weights.")
    except (OSError, ValueError) as exc:
        return FolderProblem(f"{config} is broken ({exc}).", "Download the model again, or choose another model.")
    if need_weights and not any(folder.glob("*.safetensors")):
        found = sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".gguf"))
        extra = f" It has {', '.join(found[:3])}, which Nalar does not load." if found else ""
        return FolderProblem(f"{folder} has no .safetensors weights.{extra}", "Choose a folder with safetensors files.")
    return None
