#!/usr/bin/env bash
# The Debian/Ubuntu packages Nalar needs from the system, listed in this one place. `make run` checks what Qt's
# xcb platform plugin loads; `make test` checks that plus the tools the tests drive. Safe to rerun.
#   usage: packaging/linux/system_packages.sh run|test
# Missing packages are installed with apt-get when the user is root or `sudo -n` works (no password prompt in
# the middle of make). Otherwise it stops, exit 1, and names the one command to run. Without dpkg/apt-get (not
# Debian or Ubuntu) it only says what to install: the tests that need a tool skip, naming it.
set -euo pipefail

mode=${1:-}
# PySide6's wheels bring Qt itself, not the X11/xcb libraries its platform plugin (libqxcb.so) links to.
qt=(libgl1 libegl1 libfontconfig1 libdbus-1-3 libxkbcommon-x11-0 libxcb-cursor0 libxcb-icccm4 libxcb-image0
    libxcb-keysyms1 libxcb-randr0 libxcb-render-util0 libxcb-shape0 libxcb-xinerama0 libxcb-xkb1 fonts-dejavu-core)
# The desktop tests drive the app under Xvfb (the shutdown cases under openbox, closed through wmctrl), the launcher
# test validates the .desktop file, the Windows installer's copy step (run here as in WSL) uses rsync, and the CPU
# engine preloads tcmalloc (app/engine/machine/cpu_runtime.py).
tests=(xvfb xdotool openbox wmctrl desktop-file-utils rsync libtcmalloc-minimal4)
case "$mode" in
  run) wanted=("${qt[@]}"); what="Nalar's window (Qt's xcb platform plugin)" ;;
  test) wanted=("${qt[@]}" "${tests[@]}"); what="the tests" ;;
  *) echo "usage: $0 run|test" >&2; exit 2 ;;
esac

missing() {
  local name
  for name in "${wanted[@]}"; do
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$name" 2>/dev/null || true)" = installed ] || printf '%s\n' "$name"
  done
}

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "nalar: no dpkg/apt-get here, so the system packages $what need are not checked."
  echo "nalar: install your distribution's equivalents of: ${wanted[*]}"
  exit 0
fi

mapfile -t absent < <(missing)
[ "${#absent[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "nalar: $what need these system packages, not installed: ${absent[*]}" >&2
  echo "nalar: installing them needs root. Run this once, then make $mode again:" >&2
  echo "  sudo apt-get install -y ${absent[*]}" >&2
  exit 1
fi

echo "nalar: installing the system packages $what need: ${absent[*]}"
if ! { "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
       && "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${absent[@]}"; }; then
  echo "nalar: apt-get could not install: ${absent[*]} (its message is above)." >&2
  echo "nalar: fix that, or run this once, then make $mode again:" >&2
  echo "  sudo apt-get install -y ${absent[*]}" >&2
  exit 1
fi
mapfile -t absent < <(missing)
if [ "${#absent[@]}" -ne 0 ]; then
  echo "nalar: apt-get finished, but these are still not installed: ${absent[*]}" >&2
  exit 1
fi
