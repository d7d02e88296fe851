"""`ddbench baseline update SUITE --model GPU` and `ddbench baseline diff` of two model baselines.

Update writes `<root>/model-<gpu>/<suite>.json` from the emulation's counters, the same document
`ddbench profile SUITE --gpu GPU --update-baseline FILE` writes (both go through runner/model_profiles.py).
Counts are exact, so nothing is refused for noise; a case is refused when its kernel's parity was not
judged and passed: by a normal run of the selected cases first (cuda-emu on the CPU), or by the results of
an earlier run given with `--parity-from` (a GPU run, for cases too big to emulate in full). Any refusal
leaves the stored file unchanged. With `-k` only the selected cases are replaced; the others are kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ddbench.atomic import check_writable, write_json_atomic
from ddbench.baselines.model_parity import kernel_parity_refusals, refusals_from_results
from ddbench.errors import InputError
from ddbench.gpus import gpu_spec
from ddbench.model.baseline_diff import ModelDiff, diff_model_baselines
from ddbench.model.model_baseline import BASELINE_KIND, Tolerances, baseline_document, check_baseline
from ddbench.results.case_result import CaseResult
from ddbench.results.read import read_results
from ddbench.runner.model_profiles import calibration_of, model_cases
from ddbench.suite.load import read_json
from ddbench.suite.model import Case

EXIT_REFUSED = 1


def is_model_baseline(path: Path) -> bool:
    """A file that says it is a model baseline; anything unreadable is left to the other readers' errors."""
    try:
        document = read_json(path, what="baseline")
    except InputError:
        return False
    return isinstance(document, Mapping) and document.get("kind") == BASELINE_KIND


def model_baseline_path(root: Path, gpu_key: str, suite: str) -> Path:
    return root / f"model-{gpu_key}" / f"{suite}.json"


def update_model_baseline(
    cases: Sequence[Case],
    suite: str,
    gpu_key: str,
    root: Path,
    parity: Callable[[], Sequence[CaseResult]] | str,
    merge: bool,
    out: Console,
    err: Console,
) -> None:
    """`parity`: a results file an earlier run wrote, or the run to make now (each case's own backends)."""
    path = model_baseline_path(root, gpu_key, suite)
    # Before any work: a folder in the way (model-<gpu> a file) or a stored file that is a symlink loop or a
    # device would otherwise fail at the write, a traceback after minutes of modeling.
    check_writable(path, "--model")
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
            f"model baseline not updated: {len(blocking)} problem(s); {path} is unchanged", highlight=False
        )
        raise click.exceptions.Exit(EXIT_REFUSED)
    gpu = gpu_spec(gpu_key)
    calibration = calibration_of(gpu)
    modeled = model_cases(list(cases), gpu, calibration)
    document = baseline_document(modeled.profiles, gpu.key, calibration.label)
    before = _stored(path) if path.exists() else None
    if before is not None and merge:
        document = _merged(before, document, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, document)
    for note in modeled.notes:
        out.print(f"note: {note}", highlight=False)
    if before is None:
        out.print(f"wrote {path}: {len(document['cases'])} cases, modeled on {gpu.name}", highlight=False)
        return
    diff = diff_model_baselines(before, document, Tolerances(), (str(path), str(path)), allow_mismatch=True)
    out.print(model_diff_table(diff, f"updated {path}"))


def _stored(path: Path) -> Mapping[str, Any]:
    return check_baseline(read_json(path, what="model baseline"), str(path))


def _merged(before: Mapping[str, Any], after: dict[str, Any], source: str) -> dict[str, Any]:
    """The stored cases the filter left out, kept: only when they were modeled on the same GPU and
    calibration (a mix of calibrations would compare times across them)."""
    for key in ("gpu", "calibration"):
        if before.get(key) != after[key]:
            raise InputError(
                f"stored under {key} {before.get(key)!r}, now {after[key]!r}: update the whole suite (no -k)",
                file=source,
                path=key,
            )
    return after | {"cases": dict(before["cases"]) | after["cases"]}


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
