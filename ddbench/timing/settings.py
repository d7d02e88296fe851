"""Timing settings are part of a suite's budget, so the type lives with the suite (the data layer)."""

from ddbench.suite.timing_settings import MODES, TimingSettings

__all__ = ["MODES", "TimingSettings"]
