"""vLLM's side of the tool fixtures (canitoolcall's own vLLM adapter), kept between runs under a key of all it reads.

That side is the reference Nalar's path is held to, and a pure function of its inputs: canitoolcall's fixtures
and adapter, vLLM's parsers and detokenizer, the stand-in or rebuilt tokenizers, and the harness
(tests/support/tool_fixture_sides.py). Recomputed in every run it was half of the file's time (26 of 51 CPU-s,
measured 2026-12-05). Its tally is kept beside the embedded model, as mypy's cache and the gpt-oss tokenizer are,
under a key of: each package's files and their hashes (from its RECORD: an upgrade or a changed file changes it, a
fresh venv of the same wheels keeps it), the harness's and this file's source, the stand-ins' base tokenizer files
and the gpt-oss tokenizer's own key. Any change computes it again; so does a tally with a harness error (a crash is
not a reference).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from dataclasses import asdict
from importlib.metadata import distribution, packages_distributions
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.support.tool_fixture_sides import FamilyTally

MODULES = ("vllm", "canitoolcall", "transformers", "tokenizers", "openai_harmony")


@functools.cache
def _inputs_digest() -> str:
    from tests.support import tool_fixture_sides
    from tests.support.harmony_tokenizer import _cache_key as harmony_key

    digest = hashlib.sha256()
    for source in (Path(__file__), Path(tool_fixture_sides.__file__)):
        digest.update(source.read_bytes())
    owners = packages_distributions()
    for module in MODULES:
        for dist in owners.get(module, [module]):
            digest.update(_package_files(dist).encode())
    base = tool_fixture_sides.EMBEDDED_TOKENIZER
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "config.json"):
        digest.update((base / name).read_bytes())
    digest.update(harmony_key().encode())
    return digest.hexdigest()[:16]


def _package_files(dist: str) -> str:
    """The package's own files and their hashes, from its RECORD. What the installer adds (its name, launcher
    scripts, compiled files) differs between two venvs of the same wheel (uv's and pip's), so it is left out."""
    lines = (distribution(dist).read_text("RECORD") or "").splitlines()
    files = sorted(",".join(line.split(",")[:2]) for line in lines
                   if ",sha256=" in line and not line.startswith("../") and ".dist-info/" not in line)
    return "\n".join(files) or dist


def _path(family: str) -> Path:
    from tests.conftest import WHEEL_DIR

    return WHEEL_DIR.parent / "tool-fixtures-vllm" / _inputs_digest() / f"{family}.json"


def kept_tally(family: str) -> FamilyTally | None:
    from tests.support.tool_fixture_sides import FamilyTally

    path = _path(family)
    return FamilyTally(**json.loads(path.read_text())) if path.is_file() else None


def keep_tally(family: str, tally: FamilyTally) -> None:
    """Written whole (a worker reads all of it or none); not kept when a fixture failed in the harness."""
    if any(reason.startswith("harness:") for reason in tally.failed.values()):
        return
    path = _path(family)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(handle, "w") as out:
        json.dump(asdict(tally), out)
    os.replace(temporary, path)
