"""One torch thread for the duration of a block: explain's tensors are small (T x H x 512).

On small tensors torch's intra-op pool costs more than it saves, and on a loaded 2-core CI machine its
spinning threads make a 30 ms diagnosis take seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def single_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
