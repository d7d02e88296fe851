"""What the emulation's sanitizer found in one launch (racecheck, memcheck, initcheck), as typed records.

The runtime (`kernels/emu/sanitizer.h`, `sanitizer.cpp`) reports each distinct finding once, with how many
times it happened; docs/emulation.md says what each check can and cannot see.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddbench.errors import InputError

CHECKS = ("racecheck", "memcheck", "initcheck")


@dataclass(frozen=True)
class Access:
    site: str  # file:line
    thread: int
    warp: int
    lane: int


@dataclass(frozen=True)
class Finding:
    check: str  # racecheck | memcheck | initcheck
    hazard: str  # write-read, read-write, write-write, out-of-range, uninitialized
    kernel: str
    space: str  # shared | global
    offset: int  # bytes into the buffer (global) or the dynamic shared memory
    cta: tuple[int, int, int]
    first: Access  # racecheck: the earlier access; otherwise the faulty one
    second: Access | None  # racecheck: the later access
    buffer: str | None
    count: int  # how many times it happened (same check, hazard, sites and buffer)
    message: str


@dataclass(frozen=True)
class SanitizerReport:
    findings: tuple[Finding, ...]
    findings_total: int
    truncated: bool  # more distinct findings than the runtime keeps
    checked: tuple[Mapping[str, Any], ...]  # per launch: kernel, CTAs, accesses checked, buffers

    @property
    def clean(self) -> bool:
        return self.findings_total == 0

    def summary(self) -> str:
        if self.clean:
            launches = ", ".join(
                f"{c.get('kernel')}: {c.get('shared_accesses', 0)} shared"
                f" + {c.get('global_accesses', 0)} global"
                for c in self.checked
            )
            return f"sanitizer: clean ({launches} accesses checked)"
        lines = [f"sanitizer: {self.findings_total} finding(s)"]
        lines += [f"  {f.message} [x{f.count}]" for f in self.findings]
        if self.truncated:
            lines.append("  (more distinct findings were not kept)")
        return "\n".join(lines)


def _fail(file: str | None, path: str, reason: str) -> InputError:
    return InputError(reason, file=file, path=path)


def _access(value: object, path: str, file: str | None) -> Access:
    if not isinstance(value, dict):
        raise _fail(file, path, "must be an object")
    try:
        return Access(str(value["site"]), int(value["thread"]), int(value["warp"]), int(value["lane"]))
    except (KeyError, TypeError, ValueError) as err:
        raise _fail(file, path, f"bad access record: {err}") from None


def _finding(value: object, path: str, file: str | None) -> Finding:
    if not isinstance(value, dict):
        raise _fail(file, path, "must be an object")
    check = value.get("check")
    if check not in CHECKS:
        raise _fail(file, f"{path}.check", f"must be one of {', '.join(CHECKS)}")
    try:
        cta = tuple(int(v) for v in value["cta"])
        if len(cta) != 3:
            raise ValueError("cta must have three coordinates")
        second = value.get("second")
        return Finding(
            check=check,
            hazard=str(value["hazard"]),
            kernel=str(value["kernel"]),
            space=str(value["space"]),
            offset=int(value["offset"]),
            cta=(cta[0], cta[1], cta[2]),
            first=_access(value["first"], f"{path}.first", file),
            second=None if second is None else _access(second, f"{path}.second", file),
            buffer=None if value.get("buffer") is None else str(value["buffer"]),
            count=int(value["count"]),
            message=str(value["message"]),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise _fail(file, path, f"bad finding: {err}") from None


def parse_sanitizer_report(doc: object, file: str | None = None) -> SanitizerReport:
    if not isinstance(doc, dict):
        raise _fail(file, "$", "must be an object")
    findings = doc.get("findings")
    checked = doc.get("checked")
    total = doc.get("findings_total")
    if not isinstance(findings, list) or not isinstance(checked, list):
        raise _fail(file, "$", "findings and checked must be arrays")
    if isinstance(total, bool) or not isinstance(total, int) or total < len(findings):
        raise _fail(file, "$.findings_total", "must be an integer >= the number of findings listed")
    return SanitizerReport(
        findings=tuple(_finding(f, f"$.findings[{i}]", file) for i, f in enumerate(findings)),
        findings_total=total,
        truncated=bool(doc.get("truncated", False)),
        checked=tuple(c for c in checked if isinstance(c, dict)),
    )
