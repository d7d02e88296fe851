"""`ddbench explain RESULTS.json --case ID`: which classic mistake reproduces a saved candidate output.

The inputs are regenerated from the case recorded in the results file (its workload hash must match its
ID); the candidate's output comes from the folder `ddbench run --save-outputs DIR` wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import torch
from rich.markup import escape

from ddbench.atomic import write_atomic, write_json_atomic
from ddbench.cli.common import stderr, stdout
from ddbench.errors import InputError
from ddbench.explain import explain
from ddbench.explain.threads import single_thread
from ddbench.inputs import check_inputs, generate_inputs
from ddbench.metrics.status import FAILED
from ddbench.report.diagnosis_markdown import diagnosis_section
from ddbench.report.diagnosis_table import error_map_table, ranking_table
from ddbench.report.saved_outputs import load_saved_outputs, saved_outputs_path
from ddbench.results.read import read_results
from ddbench.suite.from_json import case_from_json

_FAILED = FAILED


def find_case(document: Mapping[str, Any], query: str, file: str) -> Mapping[str, Any]:
    """The case entry with this ID, or the only one whose ID contains `query`."""
    cases = document.get("cases", [])
    exact = [c for c in cases if c["id"] == query]
    found = exact or [c for c in cases if query in c["id"]]
    if len(found) == 1:
        return found[0]
    if not found:
        known = ", ".join(c["id"] for c in cases[:5]) + (", …" if len(cases) > 5 else "")
        raise InputError(f"no case matches {query!r} (cases: {known or 'none'})", file=file, path="--case")
    ids = ", ".join(c["id"] for c in found[:5])
    raise InputError(
        f"{query!r} matches {len(found)} cases ({ids}); give more of the ID", file=file, path="--case"
    )


def pick_backend(entry: Mapping[str, Any], backend: str | None, file: str) -> str:
    ran = [name for name, run in entry.get("backends", {}).items() if run.get("ok")]
    if backend is None:
        failing = [p["candidate"] for p in entry.get("pairs", []) if p["status"] in _FAILED]
        failing = [name for name in failing if name in ran]
        if not failing:
            raise InputError(
                f"case {entry['id']} has no failing pair with an output; name the candidate with --backend "
                f"(ran: {', '.join(ran) or 'none'})",
                file=file,
            )
        return failing[0]
    if backend not in ran:
        raise InputError(
            f"{backend} produced no output in case {entry['id']} (ran: {', '.join(ran) or 'none'})",
            file=file,
            path="--backend",
        )
    return backend


def load_candidate(outputs_dir: str | None, case_id: str, backend: str) -> torch.Tensor:
    if outputs_dir is None:
        raise InputError(
            "the candidate's output is needed: pass --outputs DIR, the folder that "
            "`ddbench run --save-outputs DIR` wrote (the results file holds figures, not tensors)",
            path="--outputs",
        )
    if not Path(outputs_dir).is_dir():
        raise InputError("no such folder", file=outputs_dir, path="--outputs")
    tensors = load_saved_outputs(outputs_dir, case_id)
    if tensors is None:
        raise InputError(
            f"no saved outputs of case {case_id} (was the run given --save-outputs {outputs_dir}?)",
            file=str(saved_outputs_path(outputs_dir, case_id)),
        )
    if backend not in tensors:
        raise InputError(
            f"holds no output of {backend} (it holds: {', '.join(sorted(tensors))})",
            file=str(saved_outputs_path(outputs_dir, case_id)),
        )
    return tensors[backend]


@click.command("explain")
@click.argument("results_path", metavar="RESULTS.json", type=click.Path(dir_okay=False))
@click.option("--case", "case_query", required=True, help="Case ID (or a part of it that only one ID has).")
@click.option(
    "--backend", "backend", help="Candidate to explain (default: the first failing pair's candidate)."
)
@click.option(
    "--outputs",
    "outputs_dir",
    type=click.Path(file_okay=False),
    help="Folder of saved outputs (`ddbench run --save-outputs DIR`).",
)
@click.option("--top", type=click.IntRange(min=1), help="Show only the N best-ranked hypotheses.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the diagnosis as JSON.")
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False), help="Write it as markdown.")
def explain_command(
    results_path: str,
    case_query: str,
    backend: str | None,
    outputs_dir: str | None,
    top: int | None,
    json_path: str | None,
    markdown_path: str | None,
) -> None:
    """Rank the classic marshaling mistakes by how well each reproduces a candidate's saved output."""
    document = read_results(results_path)
    entry = find_case(document, case_query, results_path)
    candidate_name = pick_backend(entry, backend, results_path)
    candidate = load_candidate(outputs_dir, entry["id"], candidate_name)
    case = case_from_json(entry["case"], source=results_path)
    inputs = generate_inputs(case, "cpu")
    check_inputs(inputs)
    if tuple(candidate.shape) != tuple(inputs.o_extend.shape):
        raise InputError(
            f"the saved output of {candidate_name} has shape {tuple(candidate.shape)}, the case's output "
            f"{tuple(inputs.o_extend.shape)}",
            path="--outputs",
        )
    stderr.print(f"explaining {candidate_name} on {case.id}", highlight=False)
    with single_thread():
        diagnosis = explain(inputs, candidate).to_json()

    stdout.print(ranking_table(diagnosis, f"{case.id}: {candidate_name}", top))
    stdout.print(error_map_table(diagnosis["error_map"]))
    for finding in diagnosis["error_map"]["findings"]:
        stdout.print(f"- {escape(finding)}", highlight=False)
    stdout.print(f"[bold]diagnosis:[/] {escape(diagnosis['summary'])}", highlight=False)
    stdout.print(f"[dim]rule: {escape(diagnosis['rule'])}[/]", highlight=False)
    if json_path:
        write_json_atomic(json_path, {"case": case.id, "candidate": candidate_name, **diagnosis})
    if markdown_path:
        write_atomic(markdown_path, diagnosis_section(diagnosis, f"`{case.id}`: {candidate_name}", level=2))
