"""Postkit's benchmarks. Run ``python -m benchmarks --help``."""
