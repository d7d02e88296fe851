"""Suite cases that replay captured calls: what the suite layer needs to know about a capture file.

The suite stays pure: `load_suite` hands `parse_suite` a loader that reads the files (ddbench.capture does the
reading and every validity check); a case is then built from the capture's own shapes, scale and trees.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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
    q_len: int
    page_size: int
    parents: tuple[int, ...] | None  # the first request's tree, when the mask is one


CaptureLoader = Callable[[str], list[CaptureInfo]]


def file_loader(base: Path) -> CaptureLoader:
    """Read captures named relative to `base` (the suite file's folder); a folder means all of its files."""
    cache: dict[Path, CaptureInfo] = {}

    def load(name: str) -> list[CaptureInfo]:
        from ddbench.capture import capture_files, read_capture

        out = []
        for path in capture_files([base / name]):
            if path not in cache:
                capture = read_capture(path)
                x = capture.inputs
                cache[path] = CaptureInfo(
                    ref=CaptureRef(str(path), hashlib.sha256(path.read_bytes()).hexdigest()),
                    stem=path.name.removesuffix(".safetensors"),
                    model=capture.metadata.get("model"),
                    heads=x.num_heads,
                    sm_scale=x.sm_scale,
                    batch_size=x.batch_size,
                    prefix_lens=tuple(x.prefix_lens),
                    q_len=max(x.q_lens),
                    page_size=x.page_size,
                    parents=tuple(x.trees[0].parents) if x.trees else None,
                )
            out.append(cache[path])
        return out

    return load
