"""Reply text, no engine: the thinking/answer split per family, tool-call parsing, the loop guard, stream
accounting and trimming. Shared by the local host, the remote backends and the API server."""
