"""The hub as Nalar's front door: search with this machine's fit verdicts, a download queue, a model library.

Qt-free: the window (model browser, queue panel, library view) and ``nalar models`` both build on it.
"""
