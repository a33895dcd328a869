"""Benchmarks: one command each (`python -m bench.<name>`), each printing its ratio."""
