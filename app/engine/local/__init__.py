"""vLLM's own engine, run inside the engine process: the host (EngineHost), its replies, KV and start
progress, start-failure rules read from vLLM's text, vLLM's logging, and the import warm-up."""
