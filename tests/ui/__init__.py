"""Tests of app/ui, with pytest-qt."""
