"""A short latency table for the device check: CUDA events around one backend call, inputs prepared outside.

(The timing subsystem proper — adaptive sampling, graphs, cold L2, baselines — is issue 4's; this is the
quick look the device script reports.)
"""

from __future__ import annotations

import statistics

import torch

from ddbench.backends.protocol import Backend
from ddbench.inputs.layout import VerifyInputs

WARMUP = 5
SAMPLES = 50


def time_backend(backend: Backend, inputs: VerifyInputs, samples: int = SAMPLES) -> dict[str, float]:
    for _ in range(WARMUP):
        backend.run(inputs)
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        inputs.fresh_output()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        backend.run(inputs)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    q = statistics.quantiles(times, n=4)
    return {"median_us": statistics.median(times), "iqr_us": q[2] - q[0], "samples": samples}
