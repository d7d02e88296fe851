"""Markdown building blocks shared by the report sections: escaped cells and capped tables."""

from __future__ import annotations

from collections.abc import Sequence


def escape_cell(text: object) -> str:
    """One table cell: pipes escaped, line breaks flattened."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]], max_rows: int) -> list[str]:
    """GitHub-flavoured table lines; a header ending in ':' is a right-aligned (numeric) column."""
    lines = [
        "| " + " | ".join(h.rstrip(":") for h in headers) + " |",
        "|" + "|".join("---:" if h.endswith(":") else "---" for h in headers) + "|",
    ]
    lines += ["| " + " | ".join(escape_cell(c) for c in row) + " |" for row in rows[:max_rows]]
    if len(rows) > max_rows:
        lines += ["", f"… and {len(rows) - max_rows} more rows in the results file."]
    return lines
