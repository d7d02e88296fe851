"""Stored baselines: per device and suite, one entry per case and backend."""
