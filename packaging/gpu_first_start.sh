#!/usr/bin/env bash
# The GPU engine's whole first start on a real card, recorded. Run it on the machine itself after `make`:
#   packaging/gpu_first_start.sh [out.json]
# It prints the first-start checklist (driver, CUDA, compute capability, free VRAM, kernels, compiler,
# Python.h), then starts the configured model once, timing each phase vLLM logs (weights, torch.compile,
# FlashInfer kernels, KV sizing, CUDA graphs) and decode ms/token beside the planner's bandwidth floor.
# Then it starts again with n-gram speculative decoding (vLLM's prompt lookup) and records ms/token and
# vLLM's acceptance counters beside the first: speculation is the one way under the bandwidth floor.
# Run it twice: the second start shows what the caches save. Not runnable without an NVIDIA GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${VENV:-.venv}/bin/python
out=${1:-first-start-$(date +%Y%m%d-%H%M%S).json}

"$PY" -m app doctor --gpu || echo "nalar: the checklist found problems (above); the start may fail for them"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv || true
"$PY" -m app doctor --gpu --first-start --speculative off | tee "$out"
spec_out="${out%.json}-ngram.json"
"$PY" -m app doctor --gpu --first-start --speculative ngram | tee "$spec_out"
echo "nalar: recorded in $out (no speculation) and $spec_out (n-gram speculation)"
