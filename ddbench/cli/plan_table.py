"""`ddbench run --dry-run`: what each case would run, and its estimate, before anything runs."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from ddbench.backends.cost import check_estimate, format_bytes, format_seconds
from ddbench.runner import Session


def plan_table(session: Session) -> Table:
    table = Table(
        title=f"dry run: {len(session.cases)} cases on {session.device.type} (estimates, not measurements)",
        title_justify="left",
    )
    for column in ("case", "backends", "peak memory", "CPU time", "note"):
        table.add_column(column, no_wrap=column == "case")
    estimates = session.estimates()
    for case in session.cases:
        estimate = estimates[case.id]
        found = check_estimate(estimate)
        note = ("refused: " if found.refuse else "warning: ") + found.reason if found else ""
        unknown = f" (+ {', '.join(estimate.unknown)} unknown)" if estimate.unknown else ""
        table.add_row(
            escape(case.id),
            ", ".join(session.plan[case.id]),
            f"~{format_bytes(estimate.bytes)}",
            f"~{format_seconds(estimate.seconds)}{unknown}",
            escape(note),
        )
    return table
