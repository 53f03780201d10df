"""Benchmarks behind `hami bench`: apart from the runtime, which imports nothing from here."""
