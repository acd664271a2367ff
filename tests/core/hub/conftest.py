"""A fake hub on 127.0.0.1 with repos made for the hub tests: planned sizes that land in each verdict, several
quantizations in one repo, a gated repo, and two small repos that really download."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from huggingface_hub import constants

from app.core.hub.verdicts import MachineBudget
from app.core.models.planner import GIB
from app.core.settings import paths
from tests.support.hub_server import HubRepo, LocalHub

R1_7B = json.loads((paths.resources_dir() / "model_configs" / "DeepSeek-R1-Distill-Qwen-7B.json").read_text())
QWEN3 = json.loads((paths.resources_dir() / "model_configs" / "Qwen3-0.6B.json").read_text())
# A fixed 16 GiB GPU: the verdicts below must not depend on the machine the tests run on.
GPU_16 = MachineBudget("gpu", 16 * GIB, 1000.0, None, "test GPU")
TOKENIZER = b'{"model": {"type": "BPE"}}'
DOWNLOAD_BYTES = 3 << 20


def small_repo(repo_id: str, folder: Path, seed: int, **meta: object) -> HubRepo:
    """A repo that really downloads: config.json, a tokenizer and DOWNLOAD_BYTES of 'weights'."""
    weights = (bytes([seed]) * 4096 + os.urandom(64)) * (DOWNLOAD_BYTES // 4160)
    return HubRepo.from_files(repo_id, folder, {"config.json": json.dumps(QWEN3).encode(), "tokenizer.json": TOKENIZER,
                                                "model.safetensors": weights}, **meta)


def planned_repo(repo_id: str, folder: Path, weight_bytes: int, **meta: object) -> HubRepo:
    """A repo the listing says holds ``weight_bytes`` of weights (two shards), served as a few bytes."""
    files = {"config.json": json.dumps(R1_7B).encode(), "tokenizer.json": TOKENIZER,
             "model-00001-of-00002.safetensors": b"w1", "model-00002-of-00002.safetensors": b"w2"}
    repo = HubRepo.from_files(repo_id, folder, files, **meta)
    repo.listed_sizes = {"model-00001-of-00002.safetensors": weight_bytes // 2,
                         "model-00002-of-00002.safetensors": weight_bytes - weight_bytes // 2}
    return repo


def multi_repo(folder: Path) -> HubRepo:
    """bf16 at the top, an FP8 subfolder with its own config.json, two GGUF files, and an original/ copy."""
    fp8 = {**R1_7B, "quantization_config": {"quant_method": "fp8"}}
    files = {"config.json": json.dumps(R1_7B).encode(), "tokenizer.json": TOKENIZER, "model.safetensors": b"bf",
             "FP8/config.json": json.dumps(fp8).encode(), "FP8/tokenizer.json": TOKENIZER,
             "FP8/model.safetensors": b"f8", "model-Q4_K_M.gguf": b"g4", "model-Q8_0.gguf": b"g8",
             "original/consolidated.safetensors": b"or"}
    repo = HubRepo.from_files("acme/R1-Distill-7B-multi", folder, files, downloads=50,
                              tags=("text-generation", "fp8", "gguf"))
    repo.listed_sizes = {"model.safetensors": int(15.2e9), "FP8/model.safetensors": int(8.1e9),
                         "model-Q4_K_M.gguf": int(4.7e9), "model-Q8_0.gguf": int(8.1e9),
                         "original/consolidated.safetensors": int(15.2e9)}
    return repo


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalHub]:
    root = tmp_path / "hub"
    repos = [
        planned_repo("acme/R1-Distill-7B-fits", root / "fits", int(5e9), downloads=900, likes=9,
                     parameters={"BF16": 2_500_000_000}),
        planned_repo("acme/R1-Distill-7B-tight", root / "tight", int(12e9), downloads=800, license="mit"),
        planned_repo("acme/R1-Distill-7B-huge", root / "huge", int(20e9), downloads=700, trending=99.0),
        multi_repo(root / "multi"),
        small_repo("acme/small-a", root / "a", 1, downloads=5),
        small_repo("acme/small-b", root / "b", 2, downloads=4),
        small_repo("acme/gated-model", root / "gated", 3, gated="manual", downloads=3),
    ]
    # huggingface_hub reads a body in 10 MiB chunks and reports (and lets us cancel) per chunk: these
    # 3 MiB files would arrive in one. 64 KiB chunks give a progress and a cancel point mid-file.
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 64 * 1024)
    with LocalHub(repos) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        yield server


@pytest.fixture
def closed_port() -> str:
    """An endpoint on 127.0.0.1 where nothing listens: connections are refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def sparse_model_folder(folder: Path, weight_bytes: int) -> Path:
    """A model folder on disk as a user adds it: Qwen3-0.6B's config.json and one safetensors file whose header
    declares ``weight_bytes`` of bf16 weights, the file truncated to that size (sparse: nothing is written)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(QWEN3))
    header = json.dumps({"w": {"dtype": "BF16", "shape": [weight_bytes // 2],
                               "data_offsets": [0, weight_bytes]}}).encode()
    weights = folder / "model.safetensors"
    weights.write_bytes(len(header).to_bytes(8, "little") + header)
    os.truncate(weights, 8 + len(header) + weight_bytes)
    return folder
