"""Shipping an experiment's runs with its results, and reading a shipped folder back (MANIFEST.json): ship.py,
also python -m experiments.shipping.ship."""
