"""`ddbench selftest`: run every mutant (one per classic mistake) on a suite; each must be caught and named.

Exit codes: 0 every mutant caught on some case and diagnosed as itself, and the controls pass; 1 otherwise
(a hole in the suite's cases, or in `explain`); 2 bad input.
"""

from __future__ import annotations

import click

from ddbench.atomic import write_atomic, write_json_atomic
from ddbench.cli.common import stderr, stdout
from ddbench.explain.selftest import DEFAULT_AS
from ddbench.report.diagnosis_markdown import selftest_markdown
from ddbench.report.diagnosis_table import selftest_table
from ddbench.runner import Session, SessionOptions
from ddbench.runner.session import SelftestRequest

DEFAULT_SUITE = "suites/smoke.json"
EXIT_HOLE = 1


@click.command("selftest")
@click.option(
    "--suite",
    "suite_paths",
    multiple=True,
    type=click.Path(dir_okay=False),
    help=f"Suite(s) whose cases the mutants run on (default: {DEFAULT_SUITE}).",
)
@click.option("-k", "filter_expr", help="Keep cases matching: words (tags or ID parts) with and/or/not.")
@click.option("--mutant", "mutants", multiple=True, help="Only this mutant (name or hypothesis); repeatable.")
@click.option(
    "--as",
    "as_backend",
    default=DEFAULT_AS,
    show_default=True,
    help="Judge the mutants with this backend's bounds (those against the references).",
)
@click.option("--no-emu", is_flag=True, help="Skip the mutants of the emulated kernel (cuda-emu).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the report as JSON.")
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False), help="Write it as markdown.")
def selftest_command(
    suite_paths: tuple[str, ...],
    filter_expr: str | None,
    mutants: tuple[str, ...],
    as_backend: str,
    no_emu: bool,
    json_path: str | None,
    markdown_path: str | None,
) -> None:
    """Prove the suite catches every classic marshaling mistake and that explain names each one."""
    request = SelftestRequest(mutants, as_backend, emu=not no_emu)
    session = Session(
        SessionOptions(suites=suite_paths or (DEFAULT_SUITE,), filter_expr=filter_expr, selftest=request)
    )
    cases = session.cases
    assert session.mutants is not None
    chosen, controls, notes = session.mutants
    for note in notes:
        stderr.print(note, highlight=False)
    stderr.print(
        f"{len(chosen)} mutants and {len(controls)} controls on {len(cases)} cases, as {as_backend}",
        highlight=False,
    )
    done = 0

    def progress(case, seconds: float) -> None:
        nonlocal done
        done += 1
        stderr.print(f"[{done}/{len(cases)}] {case.id} ({seconds:.2f}s)", highlight=False)

    report = session.run_selftest(progress)
    document = report.to_json()
    stdout.print(selftest_table(document))
    n = len(report.mutants)
    killed = sum(m.caught > 0 for m in report.mutants)
    named = sum(m.diagnosed > 0 for m in report.mutants)
    stdout.print(
        f"kill rate {killed}/{n} ({report.kill_rate:.0%}), diagnosis rate {named}/{n} "
        f"({report.diagnosis_rate:.0%}); named on {report.case_diagnosis_rate:.0%} of the cases where "
        f"caught; {report.seconds:.1f}s",
        highlight=False,
    )
    if json_path:
        write_json_atomic(json_path, document)
    if markdown_path:
        write_atomic(markdown_path, selftest_markdown(document))
    if not report.ok:
        for m in report.mutants + report.controls:
            if m.ok:
                continue
            if m.hypothesis is None:
                why = "a correct output fails the bounds or is not matched to the reference: miscalibrated"
            elif m.caught == 0:
                why = "never caught: add a case where this mistake changes the output"
            else:
                why = "caught but never named as itself: explain cannot tell it apart"
            click.echo(f"{m.name}: {why}", err=True)
        raise click.exceptions.Exit(EXIT_HOLE)
