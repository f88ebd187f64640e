"""Benchmarks: scripts a person runs; results in benchmarks/results/."""
