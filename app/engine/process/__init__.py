"""The engine process and its pipe: the window-side client (EngineProcess), the child's server, the typed
messages between them, the benchmark entry, and ending orphans left by a dead window."""
