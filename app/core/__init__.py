"""Qt-free domain code that imports nothing above it: settings/ (the settings file, secrets, paths, logs),
chat/ (conversations and their history), models/ (catalogs, the embedded model, downloads, the planner),
measure/ (what the benchmarks measure and report), and loop_thread (an asyncio loop on a named thread)."""
