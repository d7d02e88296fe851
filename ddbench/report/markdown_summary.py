"""The markdown summary of a results document, for CI step summaries and pull-request comments (pure).

Built from the results JSON document, not from live objects, so a saved (or merged) file reports the same
way as the run that wrote it. Failures come first everywhere: a long summary is read from the top.
The diagnoses of failing pairs (ddbench.report.diagnosis_markdown) follow the tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddbench.metrics.status import FAILED, SEVERITY, Status
from ddbench.report.diagnosis_markdown import diagnosis_markdown
from ddbench.report.markdown_table import escape_cell, markdown_table
from ddbench.results.document import counts_text, run_verdict

# Rows in one table before the rest is left to the results file (GitHub caps a step summary at 1 MiB).
MAX_TABLE_ROWS = 300
_STATUS_ORDER = SEVERITY
_FAILED = FAILED


def _verdict(status: str, reasons: Sequence[str] = ()) -> str:
    if status not in _FAILED:
        return status
    return f"**{status}**" + (": " + "; ".join(reasons) if reasons else "")


def _number(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _totals(document: Mapping[str, Any]) -> list[str]:
    cases = document.get("cases", [])
    summary = document.get("summary", {})
    head = run_verdict(summary, bool(document.get("complete")))
    counts = counts_text(summary)
    device = document.get("environment", {}).get("device", {})
    packages = document.get("environment", {}).get("packages", {})
    versions = ", ".join(f"{n} {v}" for n, v in packages.items() if v and n in ("torch", "triton", "sglang"))
    state = "complete" if document.get("complete") else "**incomplete** (the run did not finish)"
    suites = ", ".join(f"`{s}`" for s in document.get("suites", []))
    shards = len(document.get("shards", []))
    return [
        f"## ddbench: {head} — {len(cases)} cases ({counts})",
        "",
        f"{state}; suites {suites or '-'}"
        + (f" (merged from {shards} shards)" if shards else "")
        + f"; device {device.get('name', '?')} ({device.get('kind', '?')})"
        + (f"; {versions}" if versions else ""),
    ]


def _failures(cases: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = []
    for c in cases:
        if c["status"] not in _FAILED:
            continue
        what = [c["error"]] if c.get("error") else []
        what += [
            f"{p['candidate']} vs {p['against']}: {p['status']} ({'; '.join(p['reasons'])})"
            for p in c["pairs"]
            if p["status"] in _FAILED
        ]
        verdict = (c.get("latency") or {}).get("verdict") or {}
        what += [
            f"latency {k['kind']} {k['subject']}: {k['detail']}"
            for k in verdict.get("checks", [])
            if k["status"] == Status.FAIL
        ]
        lines.append(f"- `{c['id']}` **{c['status']}**: " + escape_cell("; ".join(what) or "see results"))
    return ["### Failures", "", *lines] if lines else []


def _parity_rows(cases: Sequence[Mapping[str, Any]]) -> list[tuple[int, list[str]]]:
    rows = []
    for c in cases:
        if c.get("error") or not c["pairs"]:
            rows.append((_STATUS_ORDER[c["status"]], [f"`{c['id']}`", "-", "", "", _verdict(c["status"])]))
        shown = [p for p in c["pairs"] if p["status"] != Status.SKIPPED] or c["pairs"]
        for p in shown:
            f = p.get("figures") or {}
            rows.append(
                (
                    _STATUS_ORDER[p["status"]],
                    [
                        f"`{c['id']}`",
                        f"{p['candidate']} vs {p['against']}",
                        _number(f.get("max_row_ulp"), 2),
                        _number(f.get("mean_row_ulp"), 3),
                        _verdict(p["status"], p["reasons"]),
                    ],
                )
            )
    return rows


def _backend_budget(verdict: Mapping[str, Any], backend: str) -> tuple[str, list[str]]:
    """This backend's budget checks (regression, ceiling, ratios it is the candidate of): worst status."""
    checks = [k for k in verdict.get("checks", []) if k["subject"].split("/")[0] == backend]
    if not checks:
        return "-", []
    worst = min((k["status"] for k in checks), key=lambda s: _STATUS_ORDER.get(s, 9))
    return worst, [f"{k['kind']}: {k['detail']}" for k in checks if k["status"] == Status.FAIL]


def _latency_rows(cases: Sequence[Mapping[str, Any]]) -> list[tuple[int, list[str]]]:
    rows = []
    for c in cases:
        latency = c.get("latency")
        if not latency:
            continue
        for name, m in latency["backends"].items():
            ratios = [
                f"{r['median']:.3f}× {r['baseline']}" for r in latency["ratios"] if r["candidate"] == name
            ]
            status, details = _backend_budget(latency["verdict"], name)
            rows.append(
                (
                    _STATUS_ORDER.get(status, 9),
                    [
                        f"`{c['id']}`",
                        name,
                        f"{m['median_us']:.2f}",
                        f"{m['rel_noise']:.1%}",
                        ", ".join(ratios),
                        _verdict(status, details),
                    ],
                )
            )
    return rows


def _ordered(rows: list[tuple[int, list[str]]]) -> list[list[str]]:
    return [row for _, row in sorted(rows, key=lambda r: r[0])]  # stable: suite order within a status


def summary_markdown(document: Mapping[str, Any], max_rows: int = MAX_TABLE_ROWS) -> str:
    """Totals, failures, a parity table and (when timed) a latency table, failures first in each."""
    cases = document.get("cases", [])
    lines = _totals(document)
    if failures := _failures(cases):
        lines += ["", *failures]
    parity = _ordered(_parity_rows(cases))
    if parity:
        headers = ("case", "pair", "max row ULP:", "mean row ULP:", "verdict")
        lines += ["", "### Parity", "", *markdown_table(headers, parity, max_rows)]
    latency = _ordered(_latency_rows(cases))
    if latency:
        headers = ("case", "backend", "median µs:", "noise:", "ratio", "budget")
        lines += ["", "### Latency", "", *markdown_table(headers, latency, max_rows)]
    if diagnoses := diagnosis_markdown(document):
        lines += ["", diagnoses.rstrip()]
    return "\n".join(lines) + "\n"
