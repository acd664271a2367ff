"""Compare…: one question answered under 2 to 4 variants at once (the runner, the dialog and its columns)."""
