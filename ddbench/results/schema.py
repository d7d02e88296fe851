"""The results file's JSON Schema (Draft 2020-12, `results.schema.json`) and validation against it (pure).

The schema is the contract for tools that read results (CI summaries, dashboards, `ddbench merge`); the test
suite validates files written by real runs against it, so the writer and the documented format cannot drift.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError, best_match

from ddbench.suite.schema import json_path

SCHEMA_RESOURCE = "results.schema.json"


@cache
def results_schema() -> dict[str, Any]:
    return json.loads(resources.files("ddbench.results").joinpath(SCHEMA_RESOURCE).read_text())


def _leaf(error: ValidationError) -> ValidationError:
    """Under oneOf (a value or null), the branch's own complaint rather than "not valid under any"."""
    while error.context:
        # A branch whose only complaint is the value's type was meant for another kind of value.
        meant = [e for e in error.context if not (e.validator == "type" and not e.relative_path)]
        error = best_match(meant or error.context)
    return error


def results_problems(document: Any, limit: int = 10) -> list[str]:
    """`path: reason` for (at most `limit` of) the ways a document breaks the schema; empty when valid."""
    validator = jsonschema.Draft202012Validator(results_schema())
    errors = sorted(
        (_leaf(e) for e in validator.iter_errors(document)), key=lambda e: list(map(str, e.absolute_path))
    )
    return [f"{json_path(e.absolute_path)}: {e.message}" for e in errors[:limit]]
