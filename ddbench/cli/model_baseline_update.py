"""Model baselines from the command line: `ddbench baseline update SUITE --model GPU` and `ddbench profile
--update-baseline FILE` (one writer, ddbench/baselines/model_store.py, one set of rules), and `ddbench
baseline diff` of two model baselines.

Counts are exact, so nothing is refused for noise; a case is refused when its kernel's parity was not judged
and passed: by a normal run of the selected cases first (cuda-emu on the CPU), or by the results of an
earlier run given with `--parity-from` (a GPU run, for cases too big to emulate in full). Any refusal leaves
the stored file unchanged. With `-k` only the selected cases are replaced; the others are kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ddbench.baselines.model_parity import kernel_parity_refusals, refusals_from_results
from ddbench.baselines.model_store import store_model_baseline
from ddbench.cli.progress import ProgressSink
from ddbench.errors import InputError
from ddbench.model.baseline_diff import ModelDiff, diff_model_baselines
from ddbench.model.model_baseline import BASELINE_KIND, Tolerances, baseline_document
from ddbench.results.case_result import CaseResult
from ddbench.results.read import read_results
from ddbench.runner import Session, SessionOptions
from ddbench.runner.modeled_run import ModeledOutcome
from ddbench.suite.load import read_json
from ddbench.suite.model import Case

EXIT_REFUSED = 1

ParitySource = Callable[[], Sequence[CaseResult]] | str  # the run to make now, or a results file


def is_model_baseline(path: Path) -> bool:
    """A file that says it is a model baseline; anything unreadable is left to the other readers' errors."""
    try:
        document = read_json(path, what="baseline")
    except InputError:
        return False
    return isinstance(document, Mapping) and document.get("kind") == BASELINE_KIND


def require_parity(cases: Sequence[Case], parity: ParitySource, path: Path, err: Console) -> None:
    """Exit 1, naming every problem, unless each case's kernel parity was judged and passed."""
    if isinstance(parity, str):
        refused = refusals_from_results([c.id for c in cases], read_results(parity), parity)
    else:
        refused = {r.case.id: kernel_parity_refusals(r.to_json()) for r in parity()}
        refused |= {c.id: ["not run"] for c in cases if c.id not in refused}
    blocking = [f"{case_id}: {why}" for case_id, reasons in refused.items() for why in reasons]
    if blocking:
        for line in blocking:
            err.print(f"refused: {escape(line)}", highlight=False)
        err.print(
            f"model baseline not updated: {len(blocking)} problem(s); {escape(str(path))} is unchanged",
            highlight=False,
        )
        raise click.exceptions.Exit(EXIT_REFUSED)


class ParityGate:
    """The kernel-parity rule of a model-baseline update, prepared before any work: the results given, or a
    parity run of exactly the cases to be stored (each case's own backends, untimed), its Session made now
    so that what it refuses (an unavailable backend, an unjudged one) is refused before any count."""

    def __init__(self, parity_from: str | None, options: SessionOptions, cases: Sequence[Case]) -> None:
        self.parity_from = parity_from
        self.cases = list(cases)
        ids = tuple(c.id for c in cases)
        run_now = dataclasses.replace(options, model=None, selftest=None, timing=False, case_ids=ids)
        self.session = None if parity_from is not None else Session(run_now)

    def require(self, path: Path, err: Console) -> None:
        """Exit 1, naming every problem, unless each case's kernel parity was judged and passed."""
        if self.session is None:
            assert self.parity_from is not None
            require_parity(self.cases, self.parity_from, path, err)
            return
        session = self.session

        def parity() -> list[CaseResult]:
            with ProgressSink(err, len(session.cases)) as progress:
                return session.run([progress]).results

        require_parity(session.cases, parity, path, err)


def write_model_baseline(path: Path, outcome: ModeledOutcome, keep_others: bool, out: Console) -> None:
    """Store the modeled run as a model baseline and say what changed."""
    document = baseline_document(outcome.profiles, outcome.gpu.key, outcome.calibration.label)
    before, after = store_model_baseline(path, document, keep_others)
    if before is None:
        out.print(
            f"wrote {escape(str(path))}: {len(after['cases'])} cases, modeled on {outcome.gpu.name}",
            highlight=False,
        )
        return
    diff = diff_model_baselines(before, after, Tolerances(), (str(path), str(path)), allow_mismatch=True)
    out.print(model_diff_table(diff, f"updated {escape(str(path))}"))


def diff_model_files(
    before: str, after: str, tolerance: float | None, allow_mismatch: bool, out: Console
) -> None:
    """Exit 1 when a count rose or a modeled figure regressed past the tolerance (default 1 %)."""
    tolerances = Tolerances() if tolerance is None else Tolerances(modeled_us_rel=tolerance)
    docs = [read_json(Path(p), what="model baseline") for p in (before, after)]
    diff = diff_model_baselines(docs[0], docs[1], tolerances, (before, after), allow_mismatch)
    title = f"{before} -> {after} (modeled; counts exact, time tolerance {tolerances.modeled_us_rel:.0%})"
    if diff.changes:
        out.print(model_diff_table(diff, escape(title)))
    else:
        out.print(f"{escape(title)}: no figure changed", highlight=False)
    for note in diff.notes:
        out.print(f"note: {escape(note)}", highlight=False)
    for line in diff.regressions:
        out.print(f"[bold red]REGRESSED[/] {escape(line)}", highlight=False)
    changed = len({c.case for c in diff.changes if c.before is not None and c.after is not None})
    out.print(
        f"{len(diff.regressions)} regression(s), {changed} case(s) changed, {diff.compared} compared",
        highlight=False,
    )
    if diff.regressions:
        raise click.exceptions.Exit(EXIT_REFUSED)


def model_diff_table(diff: ModelDiff, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("case", "figure", "before", "after", "change"):
        table.add_column(column, no_wrap=column in ("case", "figure"))
    for c in diff.changes:
        table.add_row(
            escape(c.case),
            c.figure,
            _figure(c.before),
            _figure(c.after),
            _change(c.before, c.after, c.relative),
        )
    return table


def _change(before: float | None, after: float | None, rel: float | None) -> str:
    if before is None:
        return "new"
    if after is None:
        return "removed"
    if isinstance(before, int) and isinstance(after, int):
        return f"{after - before:+d}"  # an exact count: the difference itself
    return "" if rel is None else f"{rel:+.1%}"


def _figure(value: float | None) -> str:
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.4g}"
