"""Conversations as data, and their SQLite history."""
