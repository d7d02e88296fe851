"""Markdown sections for a run's summary: the diagnoses of failing pairs, and the mutation self-test.

Pure string builders over the JSON documents (a run's summary, a PR comment, a CI job summary include them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddbench.report.markdown_table import escape_cell
from ddbench.results.case_result import CaseResult

TOP_HYPOTHESES = 5


def diagnosis_section(diagnosis: Mapping[str, Any], heading: str, level: int = 3) -> str:
    """One diagnosis: its one-line summary, the top of the ranking, where the error is."""
    lines = [f"{'#' * level} {heading}", "", f"**{escape_cell(diagnosis['summary'])}**", ""]
    ref = diagnosis["reference"]
    lines += [
        "| # | hypothesis | variant | rel L2 | max row ULP | mean row ULP | NaN rows off |",
        "|---|---|---|---:|---:|---:|---:|",
        f"| | *(correct output)* | | {ref['rel_l2']:.3g} | {ref['max_row_ulp']:.3g} | "
        f"{ref['mean_row_ulp']:.3g} | {ref['nan_mismatch']:.0%} |",
    ]
    distinct = [e for e in diagnosis["ranking"] if e["distinct"]]
    for i, e in enumerate(distinct[:TOP_HYPOTHESES]):
        lines.append(
            f"| {i + 1} | {escape_cell(e['title'])} (`{e['hypothesis']}`) | {escape_cell(e['variant'])} | "
            f"{e['rel_l2']:.3g} | {e['max_row_ulp']:.3g} | {e['mean_row_ulp']:.3g} | "
            f"{e['nan_mismatch']:.0%} |"
        )
    invisible = [e["hypothesis"] for e in diagnosis["ranking"] if not e["distinct"]]
    if invisible:
        lines += [
            "",
            f"Same output as the correct one on this workload (not testable here): {', '.join(invisible)}.",
        ]
    not_applicable = diagnosis.get("not_applicable", [])
    if not_applicable:
        lines += [
            "",
            "Not applicable to these inputs: "
            + "; ".join(f"{n['hypothesis']} ({escape_cell(n['why'])})" for n in not_applicable)
            + ".",
        ]
    findings = diagnosis.get("error_map", {}).get("findings", [])
    if findings:
        lines += ["", "Where the error is:", ""] + [f"- {escape_cell(f)}" for f in findings]
    return "\n".join(lines) + "\n"


def _diagnosed_pairs(
    results: Sequence[CaseResult] | Mapping[str, Any],
) -> list[tuple[str, Mapping[str, Any]]]:
    """(case ID, pair JSON) of every diagnosed pair, from live results or a results document."""
    if isinstance(results, Mapping):
        cases = [(c["id"], c.get("pairs", [])) for c in results.get("cases", [])]
    else:
        cases = [(r.case.id, [p.to_json() for p in r.pairs]) for r in results]
    return [(case_id, p) for case_id, pairs in cases for p in pairs if p.get("diagnosis")]


def diagnosis_markdown(results: Sequence[CaseResult] | Mapping[str, Any]) -> str:
    """The `### Diagnoses` section: one subsection per failing pair that `explain` looked at.

    Takes a run's `CaseResult`s or its results document (what `summary_markdown` reads); empty when
    nothing was diagnosed.
    """
    sections = []
    for case_id, pair in _diagnosed_pairs(results):
        heading = f"`{case_id}`: {pair['candidate']} vs {pair['against']}"
        diagnosis = pair["diagnosis"]
        if "summary" in diagnosis:
            sections.append(diagnosis_section(diagnosis, heading, level=4))
        else:
            sections.append(f"#### {heading}\n\n{escape_cell(diagnosis.get('error', 'no diagnosis'))}\n")
    return "### Diagnoses\n\n" + "\n".join(sections) if sections else ""


def selftest_markdown(report: Mapping[str, Any]) -> str:
    cases = len(report["cases"])
    lines = [
        "### Mutation self-test",
        "",
        f"{cases} cases, each mutant judged with the bounds of `{report['as_backend']}`. "
        f"Kill rate **{report['kill_rate']:.0%}**, diagnosis rate **{report['diagnosis_rate']:.0%}** "
        f"(named on {report['case_diagnosis_rate']:.0%} of the cases where caught).",
        "",
        "| mutant | caught | diagnosed | no effect on | holes |",
        "|---|---:|---:|---:|---|",
    ]
    for m in [*report["mutants"], *report["controls"]]:
        invisible = sum(not o["visible"] for o in m["outcomes"]) if m["hypothesis"] else "-"
        diagnosed = f"{m['diagnosed']}/{m['caught']}" if m["hypothesis"] else "-"
        holes = ", ".join(f"`{h}`" for h in m["holes"]) or ""
        status = "" if m["ok"] else " **FAIL**"
        lines.append(
            f"| `{m['name']}`{status} | {m['caught']}/{m['cases']} | {diagnosed} | {invisible} | {holes} |"
        )
    if report.get("notes"):
        lines += [""] + [f"- {escape_cell(n)}" for n in report["notes"]]
    return "\n".join(lines) + "\n"
