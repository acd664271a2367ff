"""The engine layer, no Qt: vLLM's engine client (EngineHost) run in the engine process (EngineProcess, over the
typed pipe of process_protocol), remote and failover backends, typed events and failures."""
