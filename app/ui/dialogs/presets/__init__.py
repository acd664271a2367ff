"""Settings → Presets: the tab that edits the presets a chat can take (its controls live in ui/chat/presets)."""
