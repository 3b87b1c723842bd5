"""Shipping an experiment's runs with its results, and reading a shipped folder back (MANIFEST.json)."""
