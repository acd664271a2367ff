"""Remote backends: an OpenAI-compatible endpoint, and failover from the local engine to it."""
