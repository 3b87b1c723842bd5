"""The statistics experiments share: intervals and tests (stats.py), the held-out one-feature predictor."""
