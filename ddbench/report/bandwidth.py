"""The memory-bandwidth floor of a case: the least time any kernel needs to read its inputs once (pure).

Verify attention on MLA is bandwidth-bound: every request's compressed KV (576 bf16 = 1152 B per token) is
read once, plus the queries and the output. Bytes / peak DRAM bandwidth is a floor no kernel beats, and the
gap to it says how much a kernel has left. The mask (one byte per draft row and key) is small and ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddbench.model.floor import CaseShape

# Peak DRAM bandwidth (GB/s) by GPU model, matched on the device name (lower case, every word present);
# the more specific names come first.
KNOWN_BANDWIDTH_GBS: tuple[tuple[tuple[str, ...], str, float], ...] = (
    (("rtx pro 6000", "blackwell"), "RTX PRO 6000 Blackwell", 1792.0),
    (("rtx 5090",), "RTX 5090", 1792.0),
    (("h200",), "H200", 4800.0),
    (("h100", "pcie"), "H100 PCIe", 2039.0),
    (("h100",), "H100", 3350.0),
)


def known_bandwidth(device: Mapping[str, Any]) -> tuple[str, float] | None:
    """(model, GB/s) for a results file's `environment.device`, or None (a CPU, an unknown GPU)."""
    if device.get("kind") != "cuda":
        return None
    name = str(device.get("name", "")).lower()
    for words, model, gbs in KNOWN_BANDWIDTH_GBS:
        if all(w in name for w in words):
            return model, gbs
    return None


def bytes_read(case: Mapping[str, Any]) -> int:
    """Bytes a verify call must move for a results file's `case`: KV of prefix + draft, Q, and the output
    (the model's compulsory bytes; files from before ragged q_len give one q_len for every request)."""
    q_lens = tuple(case.get("q_lens") or ())
    shape = CaseShape(tuple(case["prefix_lens"]), case["q_len"], case["heads_per_rank"], q_lens)
    return shape.compulsory_bytes


def floor_us(case: Mapping[str, Any], bandwidth_gbs: float) -> float:
    return bytes_read(case) / (bandwidth_gbs * 1e9) * 1e6
