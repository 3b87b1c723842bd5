"""Benchmarks: commands that measure, never timed tests (`python -m benchmarks.step`)."""
