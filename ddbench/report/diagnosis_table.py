"""Terminal tables for `ddbench explain` and `ddbench selftest`, drawn from their JSON documents.

Rendering from the JSON (not the objects) keeps one source of truth: what the terminal shows is what the
results file and the markdown summary hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.markup import escape
from rich.table import Table

GROUPS_SHOWN = 8  # per axis; the rest are summed up in one line


def _mark(entry: Mapping[str, Any], index: int, diagnosis: Mapping[str, Any]) -> str:
    if not entry["distinct"]:
        return "[dim]= the correct output here[/]"
    if diagnosis["verdict"] == "explained" and index == 0:
        return "[bold green]explains it[/]"
    if entry["hypothesis"] in diagnosis.get("aliases", []):
        return "[green]same output here[/]"
    return ""


def ranking_table(diagnosis: Mapping[str, Any], title: str, top: int | None = None) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("hypothesis", no_wrap=True)
    table.add_column("variant", no_wrap=True)
    for column in ("rel L2", "max row ULP", "mean row ULP", "NaN rows off"):
        table.add_column(column, justify="right")
    table.add_column("", overflow="fold")
    ref = diagnosis["reference"]
    table.add_row(
        "",
        "[italic](correct output)[/]",
        "",
        f"{ref['rel_l2']:.3g}",
        f"{ref['max_row_ulp']:.3g}",
        f"{ref['mean_row_ulp']:.3g}",
        f"{ref['nan_mismatch']:.0%}",
        "[green]matches[/]" if diagnosis["verdict"] == "matches-reference" else "",
        end_section=True,
    )
    for i, entry in enumerate(diagnosis["ranking"][:top] if top else diagnosis["ranking"]):
        table.add_row(
            str(i + 1),
            escape(entry["hypothesis"]),
            escape(entry["variant"]),
            f"{entry['rel_l2']:.3g}",
            f"{entry['max_row_ulp']:.3g}",
            f"{entry['mean_row_ulp']:.3g}",
            f"{entry['nan_mismatch']:.0%}",
            _mark(entry, i, diagnosis),
            style=None if entry["distinct"] else "dim",
        )
    return table


def error_map_table(error_map: Mapping[str, Any], title: str = "error map") -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("by", no_wrap=True)
    table.add_column("group", overflow="fold")
    for column in ("rows", "NaN rows", "rel L2", "max row ULP", "share of error"):
        table.add_column(column, justify="right")
    for axis in ("request", "depth", "head", "part"):
        groups = error_map.get(f"by_{axis}", [])
        shown = sorted(groups, key=lambda g: -g["error_share"])[:GROUPS_SHOWN] if len(groups) > 8 else groups
        shown = sorted(shown, key=lambda g: g["key"])
        for i, g in enumerate(shown):
            table.add_row(
                axis if i == 0 else "",
                escape(g["label"]),
                str(g["rows"]),
                str(g["bad_rows"]) if g["bad_rows"] else "",
                f"{g['rel_l2']:.3g}",
                f"{g['max_row_ulp']:.3g}",
                f"{g['error_share']:.0%}",
                end_section=i == len(shown) - 1 and len(shown) == len(groups),
            )
        if len(shown) < len(groups):
            rest = [g for g in groups if g not in shown]
            share = sum(g["error_share"] for g in rest)
            table.add_row(
                "",
                f"… {len(rest)} more",
                str(sum(g["rows"] for g in rest)),
                "",
                "",
                "",
                f"{share:.0%}",
                end_section=True,
            )
    return table


def selftest_table(report: Mapping[str, Any]) -> Table:
    cases = len(report["cases"])
    table = Table(
        title=f"mutation self-test ({cases} cases, bounds of {report['as_backend']})", title_justify="left"
    )
    table.add_column("mutant", no_wrap=True)
    table.add_column("caught", justify="right")
    table.add_column("diagnosed", justify="right")
    table.add_column("", overflow="fold")
    for i, m in enumerate([*report["mutants"], *report["controls"]]):
        control = m["hypothesis"] is None
        notes = []
        if m["holes"]:
            notes.append("HOLE: changed the output but passed on " + ", ".join(m["holes"]))
        invisible = sum(not o["visible"] for o in m["outcomes"])
        if invisible and not control:
            notes.append(f"no effect on {invisible} case{'s' if invisible > 1 else ''}")
        wrong = [o for o in m["outcomes"] if o["caught"] and not o["diagnosed"]]
        if wrong and not control:
            named = sorted({o["top"] if o["verdict"] == "explained" else o["verdict"] for o in wrong})
            notes.append(f"not named on {len(wrong)} ({', '.join(str(n) for n in named)})")
        mark = "[green]ok[/]" if m["ok"] else "[bold red]FAIL[/]"
        table.add_row(
            escape(m["name"]),
            f"{m['caught']}/{m['cases']}",
            "-" if control else f"{m['diagnosed']}/{m['caught']}",
            mark + (" " + escape("; ".join(notes)) if notes else ""),
            end_section=i == len(report["mutants"]) - 1,
        )
    return table
