#!/usr/bin/env bash
# The half of the Windows installer that runs inside WSL (install.ps1 and uninstall.ps1 call it through
# wsl.exe; the Nalar shortcut calls `launch`). Written in bash so that it can be tested on Linux.
#   usage: inside_wsl.sh check | apt PACKAGE... | copy | clone URL | setup gpu|cpu | window-check
#          | desktop-entry REPO | remove-desktop-entry | remove-files | remove-user-data | caches
#          | remove-caches | launch
# A failed step prints "nalar-problem: ..." and "nalar-fix: ..." on stdout and exits 1; install.ps1 shows
# them. Lines starting "nalar-" are for install.ps1 (check says nalar-engine=gpu|cpu and nalar-need-gb=N);
# the rest is shown as it comes.
# Paths the tests point elsewhere: NALAR_OS_RELEASE, NALAR_WSL_LIB, NALAR_WSLG_DIR, NALAR_X11_DIR,
# NALAR_APT_LOCKS, NALAR_SYSTEM_DATA; NALAR_LOCK_TIMEOUT_S and NALAR_LOCK_POLL_S the lock wait.
set -euo pipefail

INSTALL_DIR="$HOME/nalar"
OS_RELEASE=${NALAR_OS_RELEASE:-/etc/os-release}
WSL_LIB=${NALAR_WSL_LIB:-/usr/lib/wsl/lib}  # the Windows driver's CUDA and nvidia-smi, mounted by WSL
WSLG_DIR=${NALAR_WSLG_DIR:-/mnt/wslg}
X11_DIR=${NALAR_X11_DIR:-/tmp/.X11-unix}
SYSTEM_DATA=${NALAR_SYSTEM_DATA:-/usr/share}  # WSLg reads .desktop files and icons only from system folders
MIN_UBUNTU=22.04 MIN_PYTHON=3.10 MIN_COMPUTE=7.0  # 20.04 ships Python 3.8; vLLM's kernels need sm_70+
LINUX_DRIVER_PACKAGES=("nvidia-driver-*" "nvidia-utils-*" "libnvidia-compute-*")
# Free space the set-up needs on WSL's disk, in GB: PyTorch and vLLM (CUDA: ~10 GB; CPU: ~3 GB), pip's copy
# of the wheels while it installs, and the first model download.
NEED_GB_GPU=20 NEED_GB_CPU=10
ENGINE=""  # check_gpu decides: gpu or cpu

fail() {  # problem, fix
  echo "nalar-problem: $1"
  echo "nalar-fix: $2"
  exit 1
}

# True when version $1 >= $2 (dotted numbers).
at_least() {
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

# ---- check: everything that must hold before anything is installed --------------------------------------

check_user() {
  # A fresh Ubuntu creates its user on the first interactive start; until then every `wsl -e` runs as root
  # and Nalar would land in /root, where the shortcut never looks.
  if [ "$(id -u)" -eq 0 ]; then
    fail "Ubuntu has no user of its own yet (commands run as root), so Nalar would be installed for root." \
         "Open Ubuntu once from the Start menu, create your user when it asks, close it, then run install.cmd again."
  fi
}

check_ubuntu() {
  [ -r "$OS_RELEASE" ] || fail "$OS_RELEASE is missing: this WSL distro does not say what it is." \
                               "Install Ubuntu: wsl --install -d Ubuntu, and pass -Distro Ubuntu."
  local id version
  id=$(. "$OS_RELEASE" && echo "${ID:-}")
  version=$(. "$OS_RELEASE" && echo "${VERSION_ID:-0}")
  if [ "$id" != ubuntu ]; then
    fail "this WSL distro is '$id', not Ubuntu; Nalar's set-up is tested on Ubuntu." \
         "Install Ubuntu with: wsl --install -d Ubuntu, and pass -Distro Ubuntu."
  fi
  if ! at_least "$version" "$MIN_UBUNTU"; then
    fail "this is Ubuntu $version; Nalar needs Ubuntu $MIN_UBUNTU or newer (its Python and libraries)." \
         "Install a newer Ubuntu next to it: wsl --install -d Ubuntu-24.04, and pass -Distro Ubuntu-24.04."
  fi
}

check_python() {
  local version
  version=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) \
    || fail "python3 does not run in this Ubuntu." "Run in Ubuntu: sudo apt-get install python3, then rerun."
  if ! at_least "$version" "$MIN_PYTHON"; then
    fail "Ubuntu's python3 is $version; vLLM needs Python $MIN_PYTHON or newer." \
         "Use Ubuntu 22.04 or newer: wsl --install -d Ubuntu-24.04, and pass -Distro Ubuntu-24.04."
  fi
}

check_wslg() {
  local display=${DISPLAY:-} number
  number=${display##*:}
  number=${number%%.*}  # :0.0 -> 0
  local socket="$X11_DIR/X$number"
  if [ ! -d "$WSLG_DIR" ] || [ -z "$display" ] || [ ! -S "$socket" ]; then
    fail "WSLg, which shows Linux windows on the Windows desktop, is not running here (folder $WSLG_DIR, DISPLAY='$display', X socket $socket)." \
         "Use Windows 11 or Windows 10 22H2 with WSL from the Microsoft Store: run wsl --update, then wsl --shutdown, and rerun."
  fi
}

# The apt-get purge line for the Linux driver packages: each pattern quoted on its own, so apt gets three
# patterns, not one argument with spaces ("Unable to locate package").
purge_command() {
  local command="sudo apt-get purge" pattern
  for pattern in "${LINUX_DRIVER_PACKAGES[@]}"; do command+=" '$pattern'"; done
  echo "$command"
}

cpu_route() {  # why the GPU engine can't run here; the CPU engine is installed instead
  echo "nalar-warning: $1"
  echo "nalar-warning: Nalar will use its CPU engine. It will be slow: expect a few tokens per second, with small reasoning models (Qwen3-0.6B, DeepSeek-R1-Distill-Qwen-1.5B), which the first start offers."
  ENGINE=cpu
}

check_gpu() {  # sets ENGINE: gpu with an NVIDIA card of compute capability 7.0+, else cpu
  # A Linux NVIDIA driver inside WSL replaces the Windows driver's libcuda and breaks CUDA in WSL.
  local installed
  installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${LINUX_DRIVER_PACKAGES[@]}" 2>/dev/null \
              | awk '/install ok installed/ {print $1}' | tr '\n' ' ' || true)
  local on_path
  on_path=$(command -v nvidia-smi || true)
  if [ -n "$installed" ] || { [ -n "$on_path" ] && [ "${on_path#"$WSL_LIB"/}" = "$on_path" ]; }; then
    fail "a Linux NVIDIA driver is installed inside WSL (${installed:-$on_path}); it hides the Windows driver's GPU support." \
         "Remove it in Ubuntu: $(purge_command), then in Windows: wsl --shutdown, and rerun. Only the Windows NVIDIA driver is needed."
  fi
  local smi="$WSL_LIB/nvidia-smi"
  if [ ! -x "$smi" ]; then  # AMD, Intel, or no NVIDIA driver for Windows
    cpu_route "No NVIDIA GPU reaches WSL ($smi is missing). If this PC has an NVIDIA card, install its current Windows driver and rerun install.cmd to use it."
    return
  fi
  local gpus
  if ! gpus=$("$smi" --query-gpu=name,compute_cap --format=csv,noheader 2>&1) || [ -z "$gpus" ]; then
    cpu_route "nvidia-smi inside WSL sees no GPU it can describe (${gpus:-no output}). To use an NVIDIA card, update its Windows driver (2022 or newer), run wsl --shutdown and rerun install.cmd."
    return
  fi
  local best="" name cap
  while IFS=, read -r name cap; do
    cap=${cap// /}
    echo "GPU: ${name} (compute capability ${cap})"
    if [[ "$cap" =~ ^[0-9]+\.[0-9]+$ ]] && at_least "$cap" "$MIN_COMPUTE"; then best=$name; fi
  done <<< "$gpus"
  if [ -z "$best" ]; then
    cpu_route "No NVIDIA GPU here has compute capability $MIN_COMPUTE or newer, which vLLM's GPU engine needs (GTX 10-series and older have 6.x)."
    return
  fi
  ENGINE=gpu
}

check_disk() {  # WSL's own file system; install.ps1 checks the Windows drive that holds it
  local need_gb=$1 free_kb
  free_kb=$(df -Pk "$HOME" | awk 'NR == 2 {print $4}')
  if [ -n "$free_kb" ] && [ "$free_kb" -lt $((need_gb * 1000 * 1000)) ]; then
    fail "only $((free_kb / 1000 / 1000)) GB are free in Ubuntu ($HOME); Nalar's set-up needs about $need_gb GB (PyTorch, vLLM and a model)." \
         "Free space in Ubuntu (for example: rm -rf ~/.cache/pip) and rerun install.cmd."
  fi
}

cmd_check() {
  check_user
  check_ubuntu
  check_python
  check_wslg
  check_gpu
  local need_gb=$NEED_GB_GPU
  [ "$ENGINE" = gpu ] || need_gb=$NEED_GB_CPU
  check_disk "$need_gb"
  echo "nalar-engine=$ENGINE"
  echo "nalar-need-gb=$need_gb"
  echo "nalar-home=$HOME"
}

# ---- apt: Ubuntu packages, after the package manager is free --------------------------------------------

# The lock apt and dpkg take (fcntl), tried without waiting: a lock we can't take is held by someone else.
lock_holder() {
  local lock
  for lock in ${NALAR_APT_LOCKS:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock}; do
    [ -e "$lock" ] || continue
    if ! python3 - "$lock" <<'PY' 2>/dev/null
import fcntl, sys
try:
    f = open(sys.argv[1], "r+")
except OSError:
    sys.exit(0)  # can't probe it: apt's own Lock::Timeout decides
try:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    sys.exit(1)  # held
PY
    then
      echo "$lock"
      return 0
    fi
  done
  return 1
}

wait_for_package_manager() {
  local timeout=${NALAR_LOCK_TIMEOUT_S:-1200} poll=${NALAR_LOCK_POLL_S:-5} waited=0 lock
  while lock=$(lock_holder); do
    if [ "$waited" = 0 ]; then
      echo "Waiting for Ubuntu's package manager ($lock is held, usually by its automatic first-boot updates)..."
    fi
    if [ "$(awk -v w="$waited" -v t="$timeout" 'BEGIN {print (w >= t)}')" = 1 ]; then
      fail "Ubuntu's package manager stayed busy for ${timeout} s ($lock is held: $(pgrep -a 'apt|dpkg|unattended' | head -n3 | tr '\n' ';'))." \
           "Let Ubuntu's updates finish (or run wsl --shutdown to stop them), then run install.cmd again."
    fi
    sleep "$poll"
    waited=$(awk -v w="$waited" -v p="$poll" 'BEGIN {print w + p}')
  done
}

cmd_apt() {
  [ "$(id -u)" -eq 0 ] || fail "the package step must run as root." "install.ps1 runs it with wsl -u root."
  wait_for_package_manager
  # Lock::Timeout covers a lock taken between our check and apt's own.
  local apt=(apt-get -o DPkg::Lock::Timeout=600 -q)
  if ! "${apt[@]}" update; then
    fail "apt-get update failed (the package lists above say which server)." \
         "Check the network inside Ubuntu (ping archive.ubuntu.com) and rerun."
  fi
  if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y "$@"; then
    fail "apt-get could not install: $*." "Read apt's message above; fix it and rerun install.cmd."
  fi
}

# ---- copy / clone: Nalar's files in ~/nalar, on the Linux file system ---------------------------------

cmd_copy() {
  # install.ps1 hands the Windows folder over in WSLENV with /p, which WSL translates; a folder WSL can't
  # see (a network share) arrives untranslated or empty. Never let an empty path turn into "copy /".
  local source=${NALAR_SOURCE:-}
  if [ -z "$source" ] || [ "${source:0:1}" != / ] || [ "$source" = / ] || [ ! -d "$source" ]; then
    fail "the Nalar folder is not visible inside WSL (it arrived as '$source'); network drives and UNC paths are not." \
         "Copy the Nalar folder to a local drive (for example C:\\Users\\<you>\\nalar) and run install.cmd from there."
  fi
  if [ ! -f "$source/Makefile" ] || [ ! -f "$source/app/__main__.py" ]; then
    fail "$source is not a Nalar checkout (no Makefile and app/__main__.py)." \
         "Run install.cmd from an unpacked Nalar folder, or pass -Source <folder> or -RepoUrl <git url>."
  fi
  mkdir -p "$INSTALL_DIR"
  rsync -a --delete --exclude .venv --exclude __pycache__ --exclude .pytest_cache "$source/" "$INSTALL_DIR/" \
    || fail "copying $source into $INSTALL_DIR failed (rsync's message is above)." \
            "Check that the folder is readable from Windows and that Ubuntu has free disk space, then rerun."
  normalise_line_ends "$INSTALL_DIR"
  echo "Copied $source to $INSTALL_DIR"
}

# A checkout made by Git for Windows before .gitattributes arrived, then updated with `git pull`, keeps CRLF
# in every file that has not changed since (git rewrites only changed files): bash then fails with
# "/usr/bin/env: 'bash\r'". What bash and make read in the copy gets LF. Files WSL never runs (.cmd, .ps1)
# are left alone.
normalise_line_ends() {
  local root=$1 path converted=0
  while IFS= read -r -d '' path; do
    case "$path" in *.cmd|*.bat|*.ps1) continue ;; esac
    if [ "${path##*/}" = Makefile ] || [[ "$path" == *.sh || "$path" == *.mk || "$path" == */.ci/run ]] \
       || [ "$(head -c 2 "$path" | tr -d '\0')" = '#!' ]; then
      if grep -q $'\r' "$path"; then
        sed -i 's/\r$//' "$path"
        converted=$((converted + 1))
      fi
    fi
  done < <(find "$root" \( -name .git -o -name .venv \) -prune -o -type f -print0)
  if [ "$converted" -gt 0 ]; then
    echo "Converted $converted scripts from Windows line ends (CRLF) to LF: this checkout predates .gitattributes."
  fi
}

cmd_clone() {
  local url=$1
  if [ -d "$INSTALL_DIR/.git" ]; then
    git -C "$INSTALL_DIR" pull --ff-only || fail "git could not update $INSTALL_DIR from $url." \
                                                 "Check the network, or delete $INSTALL_DIR in Ubuntu, then rerun."
  else
    git clone "$url" "$INSTALL_DIR" || fail "git could not clone $url." "Check the URL and the network, then rerun."
  fi
}

# ---- setup, the first window, the desktop entry ---------------------------------------------------------

cmd_setup() {
  local engine=${1:-}
  case "$engine" in gpu|cpu) ;; *) fail "setup needs the engine: gpu or cpu (got '$engine')." "Rerun install.cmd." ;; esac
  cd "$INSTALL_DIR"
  NALAR_ENGINE=$engine make setup \
    || fail "make setup failed inside WSL (its message is above)." "Fix what it names and rerun install.cmd: it resumes."
  .venv/bin/python -m app doctor \
    || echo "nalar-warning: nalar doctor reported a problem (above). Nalar is installed; fix that before the first start."
}

cmd_window_check() {
  # One real start under WSLg, in throwaway settings (the user's first start still gets the welcome).
  cd "$INSTALL_DIR"
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  if ! XDG_CONFIG_HOME="$scratch/config" XDG_DATA_HOME="$scratch/data" XDG_STATE_HOME="$scratch/state" \
       NALAR_QUIT_AFTER_SHOWN=1 timeout 300 .venv/bin/python -m app --report-startup; then
    fail "Nalar's window could not open through WSLg (Qt's message is above)." \
         "Run wsl --update and wsl --shutdown in Windows, then rerun install.cmd. If it persists, run in Ubuntu: cd ~/nalar && .venv/bin/python -m app, and report its message."
  fi
}

cmd_desktop_entry() {
  # WSLg gives a window its icon from a .desktop file of the same name in /usr/share/applications; it
  # ignores ~/.local/share and draws SVG icons as the penguin, so the icon is rendered to PNG.
  # NoDisplay=true: WSLg also lists every shown entry there in Windows' Start menu ("Nalar (Ubuntu)"),
  # beside the shortcut install.ps1 makes; users saw two.
  local repo=$1
  local python="$repo/.venv/bin/python" icon="$SYSTEM_DATA/icons/hicolor/256x256/apps/nalar.png"
  local entry="$SYSTEM_DATA/applications/nalar.desktop"
  [ -x "$python" ] || fail "$python is missing, so the desktop entry has nothing to start." "Rerun install.cmd."
  mkdir -p "$(dirname "$icon")" "$(dirname "$entry")"
  QT_QPA_PLATFORM=offscreen "$python" - "$repo/resources/nalar.svg" "$icon" <<'PY'
import sys
from PySide6.QtGui import QGuiApplication, QIcon
app = QGuiApplication([])
if not QIcon(sys.argv[1]).pixmap(256, 256).save(sys.argv[2], "PNG"):
    sys.exit(f"could not render {sys.argv[1]} to {sys.argv[2]}")
PY
  chmod 644 "$icon"
  cat > "$entry.tmp" <<DESKTOP
[Desktop Entry]
Type=Application
Version=1.4
Name=Nalar
GenericName=Reasoning assistant
Comment=Run reasoning models locally with vLLM and watch them think
Exec=bash "$repo/packaging/windows/inside_wsl.sh" launch
Path=$repo
Icon=$icon
Terminal=false
Categories=Utility;
StartupWMClass=nalar
NoDisplay=true
DESKTOP
  chmod 644 "$entry.tmp"
  mv "$entry.tmp" "$entry"
  echo "Installed $entry and $icon"
}

# ---- launch: what the Nalar shortcut runs -----------------------------------------------------------------

cmd_launch() {
  # wslg.exe has no console to show errors in, so the app's output goes to a log that survives the crash.
  local log_dir="${XDG_STATE_HOME:-$HOME/.local/state}/nalar"
  local log="$log_dir/wslg-launch.log"
  mkdir -p "$log_dir"
  if [ -f "$log" ] && [ "$(stat -c %s "$log")" -gt 1000000 ]; then mv -f "$log" "$log.1"; fi
  cd "$INSTALL_DIR"
  echo "--- $(date '+%F %T') starting Nalar" >> "$log"
  # exec: the app replaces this shell, so closing its window ends the one process wslg.exe started.
  RESOURCE_NAME=nalar exec .venv/bin/python -m app >> "$log" 2>&1
}

# ---- uninstall --------------------------------------------------------------------------------------------

remove_checked() {  # remove the paths, then say which are gone and fail if one is still there
  local path left=""
  for path in "$@"; do
    [ -e "$path" ] || continue
    rm -rf -- "$path"
    if [ -e "$path" ]; then left="$left $path"; else echo "removed $path"; fi
  done
  [ -z "$left" ] || fail "could not remove:$left" "Close Nalar (and anything using those folders) and run uninstall.cmd again."
}

cmd_caches() {  # the download caches Nalar's set-up filled, with their sizes
  local path
  for path in "$HOME/.cache/pip" "$HOME/.cache/vllm"; do
    [ -e "$path" ] && echo "nalar-cache=$path $(du -sh "$path" 2>/dev/null | cut -f1)"
  done
  return 0
}

main() {
  local command=${1:-}
  shift || true
  case "$command" in
    check) cmd_check ;;
    apt) cmd_apt "$@" ;;
    copy) cmd_copy ;;
    clone) cmd_clone "$1" ;;
    setup) cmd_setup "${1:-}" ;;
    window-check) cmd_window_check ;;
    desktop-entry) cmd_desktop_entry "$1" ;;
    remove-desktop-entry) remove_checked "$SYSTEM_DATA/applications/nalar.desktop" \
                                         "$SYSTEM_DATA/icons/hicolor/256x256/apps/nalar.png" ;;
    remove-files) remove_checked "$INSTALL_DIR" ;;
    remove-user-data) remove_checked "$HOME/.config/nalar" "$HOME/.local/share/nalar" "$HOME/.cache/nalar" \
                                     "$HOME/.local/state/nalar" ;;
    caches) cmd_caches ;;
    remove-caches) remove_checked "$HOME/.cache/pip" "$HOME/.cache/vllm" ;;
    launch) cmd_launch ;;
    *) echo "usage: $0 check|apt|copy|clone|setup|window-check|desktop-entry|launch|remove-...|caches" >&2; exit 2 ;;
  esac
}

main "$@"
