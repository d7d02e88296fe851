"""What the plugin counts in one process (one TP rank), as the JSON-lines log and `ddbench apply report`
show it."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from ddbench.metrics.figures import ParityFigures

MAX_REASONS = 16
OTHER = "other reasons"
_NUMBER = re.compile(r"\d+")
WORST_FIGURES = ("max_row_ulp", "mean_row_ulp", "max_channel_ulp", "max_abs", "rel_l2")


@dataclass
class ApplyCounters:
    seen: int = 0  # calls of extend_attention_fwd
    eligible: int = 0  # target-verify calls the candidate supports
    ineligible: dict[str, int] = field(default_factory=dict)  # target-verify calls it does not, by reason
    served_candidate: int = 0
    served_triton: int = 0  # target-verify calls Triton served (off, shadow, ineligible, fallback, tripped)
    compared: int = 0  # checked against Triton (shadow, apply+shadow)
    checked: int = 0  # checked alone, finite and fully written (apply)
    uncompared_graph: int = 0  # due a comparison, but made while a CUDA graph was captured (no real data)
    breaches: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)  # Triton served instead of the candidate, why
    errors: int = 0  # exceptions inside the plugin itself (the call was served by Triton)
    log_errors: int = 0  # breach captures that could not be written (the log's own failures are added to it)
    worst: dict[str, float] = field(default_factory=dict)  # the largest of each figure over compared calls

    def count(self, table: dict[str, int], reason: str) -> bool:
        """Count a call under its reason, the numbers in it (shapes, lengths) as N so that one cause is one
        entry; past MAX_REASONS causes, under "other". True the first time a cause is seen."""
        key = _NUMBER.sub("N", reason)
        if key not in table and len(table) >= MAX_REASONS:
            key = OTHER
        first = key not in table
        table[key] = table.get(key, 0) + 1
        return first

    def record(self, figures: ParityFigures) -> None:
        self.compared += 1
        for name in WORST_FIGURES:
            value = float(getattr(figures, name))
            # NaN is a breach, not a figure
            if value == value and value > self.worst.get(name, float("-inf")):
                self.worst[name] = value

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
