"""One breaker per process, hence per TP rank: after the first breach Triton serves every call there.

A breach is a bound exceeded, NaN/Inf or unwritten output, or an exception in the candidate. The breaker
never closes again by itself: a restart is the decision of whoever reads the breach.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class Breaker:
    tripped: bool = False
    reason: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def trip(self, reason: str) -> bool:
        """Open the breaker; True only for the call that opened it (the one to log and capture)."""
        with self._lock:
            if self.tripped:
                return False
            self.tripped, self.reason = True, reason
            return True
