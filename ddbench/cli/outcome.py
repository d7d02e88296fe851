"""The end of a run on the terminal: the tables, what was not run or not judged, and the one-line verdict."""

from __future__ import annotations

from pathlib import Path

from ddbench.cli.common import stderr, stdout
from ddbench.report.table import latency_table, results_table, skipped_summary
from ddbench.results.document import counts_text
from ddbench.runner import RunOutcome


def print_outcome(outcome: RunOutcome, json_path: str | None = None) -> None:
    results = outcome.results
    stdout.print(results_table(results))
    if note := skipped_summary(results):
        stdout.print(note, highlight=False)
    for name, count in outcome.not_run.items():
        stdout.print(f"{name}: not run on {count} case(s): no bound there judges it", highlight=False)
    if any(r.timing for r in results):
        stdout.print(latency_table(results))
    where = f" (results: {Path(json_path)})" if json_path else ""
    stdout.print(f"{outcome.verdict}: {counts_text(outcome.summary)}{where}", highlight=False)
    if outcome.verdict == "nothing judged":
        stderr.print(
            "no parity bound could be judged: the backends its pairs name were not run, "
            "or their outputs held nothing to compare (see 'not judged' above)",
            highlight=False,
        )
