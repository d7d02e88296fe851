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
