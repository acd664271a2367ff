"""Tests of packaging/ and of a fresh checkout: installers, launcher, line endings."""
