#!/usr/bin/env bash
# Put Nalar in this user's application menu: a .desktop launcher that starts it from this checkout's
# venv, and the icon. Per user, no root. `make install-desktop` runs it; uninstall_desktop.sh undoes it.
#   Honours XDG_DATA_HOME (default ~/.local/share).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
data=${XDG_DATA_HOME:-$HOME/.local/share}
python="$repo/.venv/bin/python"
launcher="$data/applications/nalar.desktop"
icon="$data/icons/hicolor/scalable/apps/nalar.svg"

if [ ! -x "$python" ]; then
  echo "install-desktop: $python is missing. Fix: run 'make setup' in $repo first." >&2
  exit 1
fi
# The Exec line quotes the path; these characters would need escapes that some menus get wrong.
case "$repo" in
  *[\"\`\$\\%]*) echo "install-desktop: $repo contains \" \` \$ \\ or %, which a launcher can't quote reliably." \
                       "Fix: move the checkout to a plainer path." >&2; exit 1 ;;
esac

install -D -m 644 "$repo/resources/nalar.svg" "$icon"
mkdir -p "$(dirname "$launcher")"
tmp="$launcher.tmp"
cat > "$tmp" <<DESKTOP
[Desktop Entry]
Type=Application
Version=1.4
Name=Nalar
GenericName=Reasoning assistant
Comment=Run reasoning models locally with vLLM and watch them think
Exec="$python" -m app
Path=$repo
Icon=nalar
Terminal=false
Categories=Utility;
Keywords=AI;LLM;chat;reasoning;vLLM;
StartupNotify=true
StartupWMClass=nalar
DESKTOP
mv "$tmp" "$launcher"

# Menus watch these folders and pick the entry up. A user icon cache, where one already exists, would
# hide the new icon until refreshed; we never create one.
if [ -f "$data/icons/hicolor/icon-theme.cache" ] && command -v gtk-update-icon-cache >/dev/null; then
  gtk-update-icon-cache -q -t "$data/icons/hicolor" || true
fi
echo "installed $launcher"
echo "installed $icon"
