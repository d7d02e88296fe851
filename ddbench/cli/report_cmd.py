"""`ddbench report RESULTS.json`: PNG plots and a markdown summary of a saved (or merged) results file."""

from __future__ import annotations

from pathlib import Path

import click

from ddbench.atomic import check_writable, check_writable_folder, write_atomic
from ddbench.cli.common import FiniteFloatRange, stderr
from ddbench.errors import InputError
from ddbench.report.markdown_summary import summary_markdown
from ddbench.results.read import read_results


def default_out_dir(results: str) -> Path:
    path = Path(results)
    return path.with_name(path.stem + "-report")


@click.command("report")
@click.argument("results", type=click.Path(dir_okay=False))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    help="Folder for the PNG plots (default: RESULTS-report/ beside the file).",
)
@click.option("--markdown", "markdown_path", help="Write the markdown summary here ('-': standard output).")
@click.option(
    "--bandwidth-gbs",
    type=FiniteFloatRange(min=0.0, min_open=True),
    help="Device memory bandwidth in GB/s for the latency floor (default: known GPUs by name).",
)
@click.option(
    "--outputs",
    "outputs_dir",
    type=click.Path(file_okay=False),
    help="The run's --save-outputs folder: also plot element-wise ULP histograms.",
)
def report_command(
    results: str,
    out_dir: str | None,
    markdown_path: str | None,
    bandwidth_gbs: float | None,
    outputs_dir: str | None,
) -> None:
    """Plot latency vs prefix length and the parity error of a results file; with only --markdown, write
    just the summary."""
    document = read_results(results)
    if outputs_dir is not None and not Path(outputs_dir).is_dir():
        raise InputError("no such folder", file=outputs_dir, path="--outputs")
    if markdown_path and markdown_path != "-":
        check_writable(markdown_path, "--markdown", inputs=[results])
    if out_dir is not None or not markdown_path:
        check_writable_folder(out_dir or default_out_dir(results), "--out", inputs=[results])
    if markdown_path == "-":
        click.echo(summary_markdown(document), nl=False)
    elif markdown_path:
        write_atomic(markdown_path, summary_markdown(document))
        click.echo(markdown_path)
    if markdown_path and out_dir is None:
        return
    from ddbench.report.plot_report import write_plots  # matplotlib loads only for plots

    target = Path(out_dir) if out_dir else default_out_dir(results)
    report = write_plots(document, target, bandwidth_gbs, Path(outputs_dir) if outputs_dir else None)
    for note in report.notes:
        stderr.print(f"note: {note}", highlight=False)
    for path in report.written:
        click.echo(str(path))
