"""Latency: robust statistics, clocks (host and CUDA events), and the adaptive interleaved sampler."""
