"""Tests of app/engine."""
