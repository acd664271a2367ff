"""Tests of app/commands (the `nalar` subcommands and their jobs)."""
