"""A performance model of the verify kernels from exact counters: every figure it gives is *modeled*, never
measured, and says which calibration it used."""
