"""The engine layer: vLLM in-process, typed events, no Qt."""
