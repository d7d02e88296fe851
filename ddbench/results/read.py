"""Reading a results file back (for `report`, `merge`): parsed, checked against the schema, or InputError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddbench.errors import InputError
from ddbench.results.document import FORMAT, FORMAT_VERSION
from ddbench.results.schema import results_problems
from ddbench.suite.load import read_json


def read_results(path: str | Path) -> dict[str, Any]:
    """The document, or InputError (exit 2) naming the file: missing, not JSON, not a results file."""
    if Path(path).is_dir():
        raise InputError("is a directory, not a results file", file=str(path))
    document = read_json(Path(path))
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise InputError(f'not a ddbench results file (expected "format": "{FORMAT}")', file=str(path))
    if document.get("version") != FORMAT_VERSION:
        raise InputError(
            f"results format version {document.get('version')!r} is not {FORMAT_VERSION}", file=str(path)
        )
    problems = results_problems(document)
    if problems:
        raise InputError("does not match the results schema:\n  " + "\n  ".join(problems), file=str(path))
    return document
