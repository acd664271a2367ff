"""Tests of app/server (the local API server)."""
