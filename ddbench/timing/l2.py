"""Cold-L2 mode: before each sample, write a buffer large enough to evict everything the kernel left in L2.

The size is twice the L2 the device reports, and never less than twice the largest L2 of the GPUs this
targets (128 MiB on an RTX PRO 6000 Blackwell), so a missing or under-reported property cannot leave a warm
cache behind.
"""

from __future__ import annotations

import torch

LARGEST_TARGET_L2_BYTES = 128 * 2**20
FLUSH_FACTOR = 2  # written twice over: replacement is not strictly LRU


def l2_flush_bytes(reported_l2_bytes: int | None) -> int:
    """Bytes to write per flush for a device reporting `reported_l2_bytes` (None or 0: not reported)."""
    return FLUSH_FACTOR * max(reported_l2_bytes or 0, LARGEST_TARGET_L2_BYTES)


class L2Flusher:
    def __init__(self, device: torch.device) -> None:
        reported = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", None)
        self.buffer = torch.empty(l2_flush_bytes(reported) // 4, dtype=torch.float32, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()
