"""Knowledge collections: folders of the user's own documents, indexed for full-text search (SQLite FTS5, BM25)
and, with an embedding model found on this machine, for hybrid ranking (embedder, vectors, hybrid), kept in sync
by size and mtime, and turned into numbered passages for a prompt. Qt-free; the window calls
``sync_collection`` through its one runner, off the GUI thread."""
