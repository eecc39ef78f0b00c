"""Offline and in-loop evaluation: suites, players, results (docs/DESIGN.md)."""
