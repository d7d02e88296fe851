"""A fixed torch/OpenMP thread count while timing on the CPU.

With the default pool, a 2-core machine under load gave the `reference` backend an 80 ms mode in 4 ms
scheduler steps against 286 us on one thread: worker threads waiting for cores time the scheduler, not the
code. Timing pins the count (1 by default, `timing.cpu_threads`) and records it with each measurement.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(count: int) -> Iterator[int]:
    """`torch.set_num_threads(count)` for the block, the previous count restored after; yields the count."""
    if count < 1:
        raise ValueError(f"thread count must be at least 1, got {count}")
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
