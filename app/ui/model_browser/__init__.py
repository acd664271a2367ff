"""The model browser (Engine → Choose model…): Discover (hub search with this machine's verdicts), Downloads (the
queue) and Library. Qt-free state (search_state, texts) under Qt views; the core's app/core/hub does the work."""
