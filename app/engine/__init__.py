"""The engine layer, no Qt. At the top, the contract every backend keeps: EngineBase (base), typed events
(events), typed failures (errors), what a request carries (requests), and the one factory that picks a
backend (backends). Below it, by role: reply/ (reply text), local/ (vLLM's engine, run in the engine
process), process/ (that process and its typed pipe), machine/ (what this machine can run), remote/
(OpenAI-compatible endpoints and failover). scripted holds the engine double the UI tests use."""
