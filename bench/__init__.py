"""Benchmarks: figures, never pass/fail. Run with ``make bench``."""
