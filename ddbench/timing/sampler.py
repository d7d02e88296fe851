"""The sampler: every backend of a case timed in interleaved rounds until the noise is known.

Round r times each backend once, in turn, on input set r mod n (fresh inputs, so a repeat does not time a
warm cache). Interleaving makes a candidate/baseline ratio immune to slow drifts of the machine (clock,
thermal, other tenants): both sides of a round see the same conditions. Sampling stops when every backend's
IQR/median is under the target, or at the time or sample limit, and says which.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ddbench.backends.protocol import Backend
from ddbench.inputs.layout import VerifyInputs
from ddbench.timing.clocks import L2Flusher, SmClockMonitor, time_cuda_us, time_host_us
from ddbench.timing.settings import TimingSettings
from ddbench.timing.stats import LatencyStats, RatioStats, paired_ratio, summarize


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
        out["samples_us"] = [round(s, 3) for s in self.samples_us[:keep_samples]]
        return out


class _Timed:
    """One backend, ready to be timed on each input set (a captured graph per set in graph mode)."""

    def __init__(self, backend: Backend, sets: Sequence[VerifyInputs], settings: TimingSettings) -> None:
        self.backend, self.sets = backend, sets
        self.on_gpu = sets[0].device.type == "cuda"
        self.mode = settings.mode if self.on_gpu else "host"
        self.note: str | None = None
        self.graphs: list[Any] = []
        self.flush = L2Flusher(sets[0].device) if self.on_gpu and self.mode == "cold-l2" else None
        if self.mode == "graph":
            try:
                self.graphs = [self._capture(x) for x in sets]
            except Exception as err:  # not capturable (host syncs, allocations): time plain launches
                self.mode, self.note = (
                    "plain",
                    f"graph capture failed, timed plain: {type(err).__name__}: {err}",
                )

    def _capture(self, inputs: VerifyInputs) -> Any:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.backend.run(inputs)  # warm-up outside capture: lazy init, autotuning, allocator
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.backend.run(inputs)
        torch.cuda.synchronize()
        return graph

    def warm(self, rounds: int) -> None:
        for r in range(rounds):
            self.call(r)()
        if self.on_gpu:
            torch.cuda.synchronize()

    def call(self, index: int) -> Callable[[], object]:
        if self.graphs:
            return self.graphs[index % len(self.graphs)].replay
        inputs = self.sets[index % len(self.sets)]
        return lambda: self.backend.run(inputs)

    def sample(self, index: int) -> float:
        if not self.on_gpu:
            self.sets[index % len(self.sets)].fresh_output()
            return time_host_us(self.call(index))
        inputs, flush = self.sets[index % len(self.sets)], self.flush

        def before() -> None:  # outside the events: a fresh poisoned output, then (cold-L2) the flush
            inputs.fresh_output()
            if flush is not None:
                flush()

        return time_cuda_us(self.call(index), before)


def measure(
    backends: Mapping[str, Backend],
    input_sets: Sequence[VerifyInputs],
    settings: TimingSettings,
    ratios: Sequence[tuple[str, str]] = (),
) -> tuple[dict[str, Measurement], list[RatioStats]]:
    timed = {name: _Timed(b, input_sets, settings) for name, b in backends.items()}
    monitor = SmClockMonitor() if input_sets[0].device.type == "cuda" else None
    for t in timed.values():
        t.warm(settings.warmup)
    samples: dict[str, list[float]] = {name: [] for name in timed}
    clocks: dict[str, list[int]] = {name: [] for name in timed}
    throttled: dict[str, list[bool]] = {name: [] for name in timed}
    deadline = time.perf_counter() + settings.max_seconds
    stop, rounds = "max-samples", 0
    while rounds < settings.max_samples:
        for name, t in timed.items():
            samples[name].append(t.sample(rounds))
            if monitor is not None and (state := monitor.read()) is not None:
                clocks[name].append(state[0])
                throttled[name].append(state[1])
        rounds += 1
        if rounds >= settings.min_samples:
            if all(summarize(s).rel_noise <= settings.target_rel_noise for s in samples.values()):
                stop = "noise"
                break
            if time.perf_counter() > deadline:
                stop = "time-limit"
                break
    measurements = {
        name: Measurement(
            name,
            t.mode,
            "cuda-events" if t.on_gpu else "host",
            samples[name],
            stop,
            t.note,
            clocks[name],
            throttled[name],
        )
        for name, t in timed.items()
    }
    pairs = [paired_ratio(c, b, samples[c], samples[b]) for c, b in ratios if c in samples and b in samples]
    return measurements, pairs
