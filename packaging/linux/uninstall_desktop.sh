#!/usr/bin/env bash
# Remove what install_desktop.sh installed. Nalar's settings, history and models stay.
set -euo pipefail
data=${XDG_DATA_HOME:-$HOME/.local/share}
for file in "$data/applications/nalar.desktop" "$data/icons/hicolor/scalable/apps/nalar.svg"; do
  if [ -e "$file" ]; then
    rm -f "$file"
    echo "removed $file"
  fi
done
if [ -f "$data/icons/hicolor/icon-theme.cache" ] && command -v gtk-update-icon-cache >/dev/null; then
  gtk-update-icon-cache -q -t "$data/icons/hicolor" || true
fi
exit 0
