"""The status of a judged pair, a case or a run: one enum, written to files as its plain value."""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """`str` mixin: JSON, comparisons with recorded files and dict keys all see "pass", "fail", ..."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    SKIPPED = "skipped"

    def __str__(self) -> str:
        return self.value

    @property
    def failed(self) -> bool:
        return self in (Status.FAIL, Status.ERROR)


FAILED = (Status.FAIL, Status.ERROR)
# Worst first, for reports that sort; `no-baseline` is a latency check's own verdict (latency_verdict).
SEVERITY = {Status.ERROR: 0, Status.FAIL: 1, "no-baseline": 2, Status.PASS: 3, Status.SKIPPED: 4}
