"""Benchmarks: one command each (`python -m bench.<name>`), each printing its ratio. What they
share with the tests is in ``harness`` and ``studies``."""
