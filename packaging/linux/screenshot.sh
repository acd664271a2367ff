#!/usr/bin/env bash
# Regenerate the README screenshot: Nalar on the real engine under Xvfb, mid-answer.
#   usage: packaging/linux/screenshot.sh [out.png]     (needs Debian's xvfb: apt install xvfb)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-docs/screenshot.png}
command -v xvfb-run >/dev/null || { echo "screenshot: install xvfb first (apt install xvfb)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A throwaway config dir: the screenshot's settings never touch the user's.
XDG_CONFIG_HOME="$tmp/config" QT_QPA_PLATFORM=xcb \
  xvfb-run -a -s "-screen 0 1280x800x24" .venv/bin/python packaging/linux/screenshot.py "$out"
