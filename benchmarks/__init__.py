"""Benchmarks, run as modules: ``python -m benchmarks.<name>``; each prints one table."""
