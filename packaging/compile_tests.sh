#!/usr/bin/env bash
# pytest rewrites each test module's asserts before importing it, and caches the result in __pycache__. Every
# pytest process of `make test` (2 fast workers, 3 real ones) collects every module, so without that cache each one
# rewrote all of them again: about 6 s of each process's start. Two processes fill the cache here, once, each
# collecting half the files (the larger ones dealt out in turn). A module that can't be collected is left to the
# test run, which names it; this step never fails.
set -uo pipefail
PY=${VENV:-.venv}/bin/python
mapfile -t files < <(find tests -name 'test_*.py' -printf '%s %p\n' | sort -rn | cut -d' ' -f2-)
half=()
other=()
for i in "${!files[@]}"; do
  if (( i % 2 )); then other+=("${files[i]}"); else half+=("${files[i]}"); fi
done
collect() {
  # PYTHONDONTWRITEBYTECODE would stop pytest writing its cache (the workers read it either way).
  env -u PYTHONDONTWRITEBYTECODE QT_QPA_PLATFORM=offscreen "$PY" -m pytest --collect-only -q -p no:cacheprovider "$@"
}
collect "${half[@]}" &
collect "${other[@]}" &
wait
exit 0
