"""One backend's timing on one case: its samples, how they were taken, and why sampling stopped."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddbench.timing.stats import LatencyStats, summarize


@dataclass
class Measurement:
    backend: str
    mode: str  # what was timed: graph, plain, cold-l2, or host
    clock: str  # cuda-events or host
    samples_us: list[float]
    stop_reason: str
    note: str | None = None
    sm_clock_mhz: list[int] = field(default_factory=list)
    throttled: list[bool] = field(default_factory=list)
    prepare_us: float | None = None  # host time of the backend's preparation (marshaling), median
    cpu_threads: int | None = None  # torch threads while sampling on the CPU; None on a GPU

    @property
    def stats(self) -> LatencyStats:
        return summarize(self.samples_us)

    def to_json(self, keep_samples: int = 200) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mode": self.mode,
            "clock": self.clock,
            **self.stats.to_json(),
            "stop_reason": self.stop_reason,
        }
        if self.note:
            out["note"] = self.note
        if self.sm_clock_mhz:
            out["sm_clock_mhz"] = {"min": min(self.sm_clock_mhz), "max": max(self.sm_clock_mhz)}
            out["throttled_samples"] = sum(self.throttled)
        if self.prepare_us is not None:
            out["prepare_us"] = round(self.prepare_us, 3)
        if self.cpu_threads is not None:
            out["cpu_threads"] = self.cpu_threads
        out["samples_us"] = [round(s, 3) for s in self.samples_us[:keep_samples]]
        return out
