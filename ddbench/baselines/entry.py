"""One stored baseline entry (a case's backend on one device), typed and checked field by field (pure).

The on-disk form is the JSON object `to_json` writes; `from_json` reads files written before this type existed
(only `latency` was ever required) and keeps fields it does not know, so a load-and-save loses nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddbench.baselines.checked_latency import checked_latency
from ddbench.timing.stats import LatencyStats

_KNOWN = (
    "case_hash",
    "kernel_hash",
    "latency",
    "mode",
    "clock",
    "stop_reason",
    "sm_clock_mhz",
    "parity",
    "environment",
    "date",
)


class EntryProblem(ValueError):
    """A field of an entry that cannot be used; `field` is its path inside the entry."""

    def __init__(self, field_path: str, reason: str) -> None:
        self.field = field_path
        self.reason = reason
        super().__init__(f"{field_path}: {reason}")


@dataclass(frozen=True)
class ClockRange:
    """The SM clock seen while timing (MHz): a throttled GPU shows a low minimum."""

    min: float
    max: float

    def to_json(self) -> dict[str, float]:
        return {"min": self.min, "max": self.max}


@dataclass(frozen=True)
class BaselineEntry:
    latency: LatencyStats
    case_hash: str | None = None
    kernel_hash: str | None = None
    mode: str | None = None
    clock: str | None = None
    stop_reason: str | None = None
    sm_clock_mhz: ClockRange | None = None
    parity: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # "cand vs against" -> figures
    environment: Mapping[str, Any] = field(default_factory=dict)
    date: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # fields this version does not know, kept as read

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out.update(
            {
                "case_hash": self.case_hash,
                "kernel_hash": self.kernel_hash,
                "latency": self.latency.to_json(),
                "mode": self.mode,
                "clock": self.clock,
                "stop_reason": self.stop_reason,
                "sm_clock_mhz": self.sm_clock_mhz.to_json() if self.sm_clock_mhz else None,
                "parity": {k: dict(v) for k, v in self.parity.items()},
                "environment": dict(self.environment),
                "date": self.date,
            }
        )
        return out

    @classmethod
    def from_json(cls, data: Any) -> BaselineEntry:
        """Raises EntryProblem naming the first field (a path inside the entry) that is wrong."""
        if not isinstance(data, dict):
            raise EntryProblem("(entry)", "must be an object")
        try:
            latency = checked_latency(data.get("latency"))
        except ValueError as err:
            raise EntryProblem("latency", str(err).removeprefix("latency.")) from None
        strings = {name: _optional_string(data, name) for name in _STRING_FIELDS}
        return cls(
            latency=latency,
            sm_clock_mhz=_clock_range(data.get("sm_clock_mhz")),
            parity=_parity(data.get("parity")),
            environment=_object(data, "environment"),
            extra={k: v for k, v in data.items() if k not in _KNOWN},
            **strings,
        )


_STRING_FIELDS = ("case_hash", "kernel_hash", "mode", "clock", "stop_reason", "date")


def _optional_string(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise EntryProblem(name, f"must be a string or null, not {type(value).__name__}")
    return value


def _object(data: dict[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise EntryProblem(name, f"must be an object, not {type(value).__name__}")
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _clock_range(value: Any) -> ClockRange | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(_number(value.get(k)) for k in ("min", "max")):
        raise EntryProblem("sm_clock_mhz", 'must be null or {"min": MHz, "max": MHz}')
    if not 0 < value["min"] <= value["max"]:
        raise EntryProblem(
            "sm_clock_mhz", f"min {value['min']:g} and max {value['max']:g} are not 0 < min <= max"
        )
    return ClockRange(value["min"], value["max"])


def _parity(value: Any) -> dict[str, dict[str, float]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise EntryProblem("parity", "must be an object of pairs")
    for pair, figures in value.items():
        if not isinstance(figures, dict):
            raise EntryProblem(f"parity.{pair}", "must be an object of figures")
        for name, figure in figures.items():
            if not _number(figure):
                raise EntryProblem(f"parity.{pair}.{name}", "must be a number (not NaN)")
    return value
