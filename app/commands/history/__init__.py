"""`nalar history ...`: the conversation history from a terminal (search, export)."""
