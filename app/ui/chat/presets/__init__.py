"""Per-chat generation settings: the preset and think-budget controls beside Think, their binding to the chat
shown (the Settings tab that edits the presets is ui/dialogs/presets)."""
