"""The server-parity report as markdown: the verdict, each gate, each server's figures, and each prompt."""

from __future__ import annotations

from ddbench.report.markdown_table import escape_cell, markdown_table
from ddbench.results.server_parity import ServerParityReport, ServerRun

MAX_ROWS = 200


def server_parity_markdown(report: ServerParityReport) -> str:
    lines = [f"# ddbench server-parity: {report.status}", ""]
    lines += [f"- {escape_cell(reason)}" for reason in report.reasons()] + [""]
    if report.gates:
        rows = [(g.gate, g.status, g.detail) for g in report.gates]
        lines += [*markdown_table(("gate", "status", "detail"), rows, MAX_ROWS), ""]
    if report.runs:
        headers = ("server", "ready s:", "generate s:", "tokens:", "mean accept length:", "error")
        rows = [_server_row(run) for run in report.runs]
        lines += [*markdown_table(headers, rows, MAX_ROWS), ""]
    if len(report.runs) == 2 and all(run.generations for run in report.runs):
        pairs = zip(report.runs[0].generations, report.runs[1].generations, strict=True)
        rows = []
        for index, (a, b) in enumerate(pairs):
            n = next(
                (i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids, strict=False)) if x != y), None
            )
            same = "all" if n is None and len(a.token_ids) == len(b.token_ids) else f"first {n}"
            rows.append((index, len(a.token_ids), same, "yes" if a.text == b.text else "no"))
        lines += [*markdown_table(("prompt:", "tokens:", "tokens equal", "text equal"), rows, MAX_ROWS), ""]
    return "\n".join(lines)


def _server_row(run: ServerRun) -> tuple[object, ...]:
    tokens, steps = run.accept_counts
    return (
        run.label,
        _seconds(run.ready_seconds),
        _seconds(run.generate_seconds),
        tokens,
        f"{tokens / steps:.3f}" if steps else "-",
        run.error.splitlines()[0] if run.error else "",
    )


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
