"""When to stop sampling: a criterion fed one interleaved round of samples at a time (nvbench's stopping
criterion, as an object so it is tested with made-up samples and a made-up clock).

Finished, in this order of precedence, once at least `min_samples` rounds are in:
- "noise": every series' IQR / median is at most `target_rel_noise`;
- "time-limit": `max_seconds` have passed on the clock since the rule was made;
and in any case after `max_samples` rounds ("max-samples").
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from ddbench.timing import clocks
from ddbench.timing.settings import TimingSettings
from ddbench.timing.stats import relative_noise

NOISE, TIME_LIMIT, MAX_SAMPLES = "noise", "time-limit", "max-samples"


class StoppingRule:
    def __init__(self, settings: TimingSettings, clock: clocks.Clock | None = None) -> None:
        self.settings = settings
        self.clock = clocks.host_clock(clock)
        self.rounds = 0
        self.reason: str | None = None
        self._sorted: dict[str, list[float]] = {}
        self._deadline_ns = self.clock.now_ns() + int(settings.max_seconds * 1e9)

    def add(self, round_samples: Mapping[str, float]) -> None:
        """One round: a sample (us) per series; every round names the same series."""
        for name, sample in round_samples.items():
            bisect.insort(self._sorted.setdefault(name, []), sample)
        self.rounds += 1
        self.reason = self._reason()

    def is_finished(self) -> bool:
        return self.reason is not None

    def noise(self, name: str) -> float:
        return relative_noise(self._sorted[name])

    def _reason(self) -> str | None:
        s = self.settings
        if self.rounds >= s.min_samples:
            if all(relative_noise(v) <= s.target_rel_noise for v in self._sorted.values()):
                return NOISE
            if self.clock.now_ns() > self._deadline_ns:
                return TIME_LIMIT
        return MAX_SAMPLES if self.rounds >= s.max_samples else None
