"""The one place the baselines read results files, so the results reader can move with a one-line edit."""

from __future__ import annotations

from ddbench.results.read import read_results

__all__ = ["read_results"]
