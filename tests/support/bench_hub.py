"""Qwen3-like repos on the fake hub (``hub_server.LocalHub``) for the model browser's tests and `nalar bench models`.

Each repo holds a real config.json (from Nalar's own model configs), a tokenizer and weights the listing says are
gigabytes but that are served as a few bytes: the verdicts are the planner's on real shapes, and nothing big is
written. Sizes span what fits a 2-core, 23 GiB test machine and what doesn't.

Run as a program (``python -m tests.support.bench_hub COUNT``), it serves COUNT such repos, prints the endpoint on
its first line, and ends when its stdin closes: the bench starts it as a child process, so the app never imports
tests/ and the hub's threads don't share the window's GIL (a real hub is on another machine).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from app.core.settings import paths
from tests.support.hub_server import HubRepo, LocalHub

TOKENIZER = b'{"model": {"type": "BPE"}}'
# (config file, name part, weight bytes the listing claims, parameters)
SHAPES = (("Qwen3-0.6B.json", "0.6B", int(1.2e9), 600_000_000),
          ("Qwen3-1.7B.json", "1.7B", int(3.4e9), 1_700_000_000),
          ("DeepSeek-R1-Distill-Qwen-7B.json", "8B", int(16.4e9), 8_200_000_000),
          ("DeepSeek-R1-Distill-Qwen-14B.json", "14B", int(29.5e9), 14_800_000_000),
          ("QwQ-32B.json", "32B", int(65.5e9), 32_800_000_000))


def config(name: str) -> dict[str, object]:
    return json.loads((paths.resources_dir() / "model_configs" / name).read_text())


def planned_repo(repo_id: str, folder: Path, shape: tuple[str, str, int, int], downloads: int,
                 fp8: bool = False) -> HubRepo:
    """A repo of ``shape``: bf16 shards (and an FP8 copy in a subfolder with ``fp8``), sizes as listed only."""
    conf_name, _, weight_bytes, parameters = shape
    conf = config(conf_name)
    files = {"config.json": json.dumps(conf).encode(), "tokenizer.json": TOKENIZER,
             "model-00001-of-00002.safetensors": b"w1", "model-00002-of-00002.safetensors": b"w2"}
    if fp8:
        files.update({"FP8/config.json": json.dumps({**conf, "quantization_config": {"quant_method": "fp8"}}).encode(),
                      "FP8/tokenizer.json": TOKENIZER, "FP8/model.safetensors": b"f8"})
    tags = ("text-generation", "safetensors", "fp8") if fp8 else ("text-generation", "safetensors")
    repo = HubRepo.from_files(repo_id, folder, files, downloads=downloads, likes=downloads // 100,
                              trending=float(downloads % 97), tags=tags, parameters={"BF16": parameters})
    repo.listed_sizes = {"model-00001-of-00002.safetensors": weight_bytes // 2,
                         "model-00002-of-00002.safetensors": weight_bytes - weight_bytes // 2}
    if fp8:
        repo.listed_sizes["FP8/model.safetensors"] = weight_bytes // 2
    return repo


def small_repo(repo_id: str, folder: Path, seed: int, size: int = 3 << 20, **meta: object) -> HubRepo:
    """A repo that really downloads: a Qwen3 config.json, a tokenizer and ``size`` bytes of 'weights'."""
    weights = (bytes([seed]) * 4096 + os.urandom(64)) * (size // 4160)
    files = {"config.json": json.dumps(config("Qwen3-0.6B.json")).encode(), "tokenizer.json": TOKENIZER,
             "model.safetensors": weights}
    return HubRepo.from_files(repo_id, folder, files, **meta)


def qwen3_repos(folder: Path, count: int) -> list[HubRepo]:
    """``count`` repos whose names hold "qwen3", most downloaded first; the 8B ones have an FP8 copy too."""
    repos = []
    for i in range(count):
        shape = SHAPES[i % len(SHAPES)]
        repo_id = f"bench{i:02d}/Qwen3-{shape[1]}-v{i}"
        repos.append(planned_repo(repo_id, folder / f"r{i}", shape, downloads=1_000_000 - i * 1000, fp8=i % 5 == 2))
    return repos


def main(argv: list[str]) -> int:
    count = int(argv[1]) if len(argv) > 1 else 60
    with tempfile.TemporaryDirectory(prefix="nalar-bench-hub-") as folder, \
            LocalHub(qwen3_repos(Path(folder), count)) as hub:
        print(hub.endpoint, flush=True)
        sys.stdin.read()  # until the bench closes our stdin (or ends)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
