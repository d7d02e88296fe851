"""Suite cases that replay captured calls: what the suite layer needs to know about a capture file.

The suite layer never reads captures itself: it is handed a loader (ddbench.inputs.suite_file wires the
capture reader of ddbench.inputs); a case is then built from the capture's own shapes, scale and trees.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ddbench.suite.model import CaptureRef


@dataclass(frozen=True)
class CaptureInfo:
    ref: CaptureRef
    stem: str
    model: str | None
    heads: int
    sm_scale: float
    batch_size: int
    prefix_lens: tuple[int, ...]
    q_len: int  # the longest request's
    q_lens: tuple[int, ...]
    page_size: int
    parents: tuple[int, ...] | None  # the first request's tree, when the mask is one


CaptureLoader = Callable[[str], list[CaptureInfo]]
