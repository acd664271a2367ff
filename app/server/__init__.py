"""The local OpenAI-compatible HTTP API server: a client of engines, as app/ui is (no Qt)."""
