"""`ddbench merge A.json B.json ... -o OUT.json`: one results file from the shards of a run."""

from __future__ import annotations

import click

from ddbench.atomic import check_writable, write_json_atomic
from ddbench.cli.common import stdout
from ddbench.results.merge import merge_results
from ddbench.results.read import read_results


@click.command("merge")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Merged file.")
def merge_command(inputs: tuple[str, ...], out_path: str) -> None:
    """Merge results files of shards (`run --shard i/n`); refuses a case ID found in two inputs."""
    check_writable(out_path, "-o", inputs=inputs)
    merged = merge_results([(path, read_results(path)) for path in inputs])
    write_json_atomic(out_path, merged)
    counts = ", ".join(f"{n} {status}" for status, n in merged["summary"].items())
    state = "complete" if merged["complete"] else "incomplete"
    if merged["missing_shards"]:
        state += f": shards {', '.join(merged['missing_shards'])} missing"
    cases = len(merged["cases"])
    stdout.print(
        f"merged {len(inputs)} files, {cases} cases ({counts or 'none'}; {state}) into {out_path}",
        highlight=False,
    )
