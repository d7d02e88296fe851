"""The sampler: every subject of a case timed in interleaved rounds until the noise is known.

Round r times each subject once, in turn, on input set r mod n (fresh inputs, so a repeat does not time a
warm cache). Interleaving makes a candidate/baseline ratio immune to slow drifts of the machine (clock,
thermal, other tenants): both sides of a round see the same conditions. `StoppingRule` says when to stop
and why. The subjects are callables (`TimingSubject`): building them from backends and inputs is the
caller's business, so timing sits below both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence

import torch

from ddbench.timing.clocks import Clock, SmClockMonitor, time_cuda_us, time_host_us
from ddbench.timing.graphs import CapturedGraph, capture, check_did_work, verify_call
from ddbench.timing.l2 import L2Flusher
from ddbench.timing.measurement import Measurement
from ddbench.timing.settings import COLD_MODES, GRAPH_MODES, TimingSettings
from ddbench.timing.stats import RatioStats, paired_ratio
from ddbench.timing.stopping import StoppingRule
from ddbench.timing.subject import TimingSubject
from ddbench.timing.threads import torch_threads

__all__ = ["Measurement", "TimingSubject", "measure"]


class _Timed:
    """One subject, ready to be timed on each input set (a captured graph per set in graph mode)."""

    def __init__(
        self, name: str, subject: TimingSubject, device: torch.device, settings: TimingSettings
    ) -> None:
        self.name, self.subject = name, subject
        self.on_gpu = device.type == "cuda"
        self.mode = settings.mode if self.on_gpu else "host"
        self.note: str | None = None
        self.unheld = 0  # GPU samples whose hold ended before the launch was queued (clocks.time_cuda_us)
        self.graphs: list[CapturedGraph] = []
        self.flush = L2Flusher(device) if self.on_gpu and self.mode in COLD_MODES else None
        if self.mode in GRAPH_MODES:
            try:
                self.graphs = [capture(launch) for launch in subject.launches]
            except Exception as err:  # not capturable (host syncs, allocations): time plain launches
                plain = "cold-l2" if self.flush is not None else "plain"
                self.mode, self.note = (
                    plain,
                    f"graph capture failed, timed {plain}: {type(err).__name__}: {err}",
                )

    def call(self, index: int) -> Callable[[], object]:
        if self.graphs:
            return self.graphs[index % len(self.graphs)].replay
        return self.subject.launches[index % len(self.subject.launches)]

    def verify(self) -> None:
        """Each graph (or the first plain launch) once on a poisoned output: NoKernelWork if it did none."""
        for index, graph in enumerate(self.graphs):
            verify_call(graph.replay, graph.output, self.subject.before[index], graph.node_count, self.name)
        if not self.graphs:
            self.subject.before[0]()
            output = self.subject.launches[0]()
            if not isinstance(output, torch.Tensor):
                raise TypeError(f"{self.name}: the launch returned {type(output).__name__}, not its output")
            if output.is_cuda:
                torch.cuda.synchronize(output.device)
            check_did_work(output, None, self.name)

    def warm(self, rounds: int) -> None:
        for r in range(rounds):
            self.call(r)()
        if self.on_gpu:
            torch.cuda.synchronize()

    def sample(self, index: int, clock: Clock | None) -> float:
        before = self.subject.before[index % len(self.subject.before)]
        if not self.on_gpu:
            before()
            return time_host_us(self.call(index), clock)
        flush = self.flush

        def before_sample() -> None:  # outside the events: a fresh poisoned output, then (cold-L2) the flush
            before()
            if flush is not None:
                flush()

        us, held = time_cuda_us(self.call(index), before_sample)
        self.unheld += not held
        return us

    def notes(self, samples: int) -> str | None:
        """The capture fallback, and how many samples the GPU may have waited on the host in."""
        unheld = (
            f"{self.unheld} of {samples} samples: the GPU passed the start event before the launch "
            "was queued (they may hold host time)"
            if self.unheld
            else None
        )
        return "; ".join(n for n in (self.note, unheld) if n) or None


def measure(
    subjects: Mapping[str, TimingSubject],
    device: torch.device,
    settings: TimingSettings,
    ratios: Sequence[tuple[str, str]] = (),
    clock: Clock | None = None,
) -> tuple[dict[str, Measurement], list[RatioStats]]:
    """Time every subject, interleaved, on `device`; on the CPU with `settings.cpu_threads` torch threads.

    `clock` is the host clock (None: the process's); GPU samples are CUDA events. Raises NoKernelWork
    for a subject whose launch or graph leaves its output poisoned.
    """
    on_cpu = device.type != "cuda"
    pinned = torch_threads(settings.cpu_threads) if on_cpu else contextlib.nullcontext(None)
    with pinned as cpu_threads:
        timed = {name: _Timed(name, s, device, settings) for name, s in subjects.items()}
        for t in timed.values():
            t.verify()
            t.warm(settings.warmup)
        monitor = SmClockMonitor() if not on_cpu else None
        samples: dict[str, list[float]] = {name: [] for name in timed}
        clocks: dict[str, list[int]] = {name: [] for name in timed}
        throttled: dict[str, list[bool]] = {name: [] for name in timed}
        rule = StoppingRule(settings, clock)
        while not rule.is_finished():
            this_round = {}
            for name, t in timed.items():
                this_round[name] = t.sample(rule.rounds, clock)
                samples[name].append(this_round[name])
                if monitor is not None and (state := monitor.read()) is not None:
                    clocks[name].append(state[0])
                    throttled[name].append(state[1])
            rule.add(this_round)
    stop = rule.reason or "max-samples"
    measurements = {
        name: Measurement(
            name,
            t.mode,
            "cuda-events" if t.on_gpu else "host",
            samples[name],
            stop,
            t.notes(len(samples[name])),
            clocks[name],
            throttled[name],
            prepare_us=subjects[name].prepare_us,
            cpu_threads=cpu_threads,
        )
        for name, t in timed.items()
    }
    pairs = [paired_ratio(c, b, samples[c], samples[b]) for c, b in ratios if c in samples and b in samples]
    return measurements, pairs
