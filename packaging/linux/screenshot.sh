#!/usr/bin/env bash
# Regenerate the README screenshots: Nalar on the real engine under Xvfb (mid-answer, folded thinking,
# a second turn: out.png, out-folded.png, out-second-turn.png).
#   usage: packaging/linux/screenshot.sh [out.png]     (needs Debian's xvfb; openbox, if installed, draws the frame)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-docs/screenshot.png}
command -v xvfb-run >/dev/null || { echo "screenshot: install xvfb first (apt install xvfb)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Throwaway config and data dirs: the screenshot's settings and history never touch the user's.
XDG_CONFIG_HOME="$tmp/config" XDG_DATA_HOME="$tmp/data" QT_QPA_PLATFORM=xcb \
  xvfb-run -a -s "-screen 0 1280x800x24" bash -c '
    if command -v openbox >/dev/null; then openbox & wm=$!; fi
    .venv/bin/python packaging/linux/screenshot.py "$1"; rc=$?
    [ -n "${wm:-}" ] && kill "$wm"
    exit $rc' screenshot "$out"
