"""Nalar: a desktop assistant that runs reasoning models locally on vLLM."""

__version__ = "0.1.0"
