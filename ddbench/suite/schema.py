"""Structural validation of a suite file against the shipped JSON Schema (Draft 2020-12)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError, best_match

from ddbench.errors import InputError

SCHEMA_RESOURCE = "schema.json"


@cache
def suite_schema() -> dict[str, Any]:
    return json.loads(resources.files("ddbench.suite").joinpath(SCHEMA_RESOURCE).read_text())


def json_path(parts: Any) -> str:
    """`cases[2].tree.budget` from jsonschema's deque of keys and indices."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _explain(error: ValidationError) -> str:
    """Say what was expected in words a suite author reads, not the schema's internals."""
    if error.validator in ("oneOf", "anyOf") and error.context:
        deepest = best_match(error.context)
        if deepest.validator not in ("type",) or len(error.context) == 1:
            return _explain(deepest)
        return f"{error.instance!r} is not any of the accepted forms"
    if error.validator in ("additionalProperties", "unevaluatedProperties"):
        known = sorted(error.schema.get("properties", {}))
        if error.validator == "unevaluatedProperties":
            known = sorted({*known, *suite_schema()["$defs"]["case_fields"]["properties"]})
        unknown = sorted(set(error.instance) - set(known)) if isinstance(error.instance, dict) else []
        return f"unknown field {', '.join(map(repr, unknown))}; known fields: {', '.join(known)}"
    if error.validator == "enum":
        allowed = ", ".join(json.dumps(v) for v in error.validator_value)
        return f"{json.dumps(error.instance)} is not one of {allowed}"
    return error.message


def schema_errors(document: Any, file: str) -> list[InputError]:
    validator = jsonschema.Draft202012Validator(suite_schema())
    errors = sorted(
        validator.iter_errors(document), key=lambda e: (list(map(str, e.absolute_path)), e.message)
    )
    out: list[InputError] = []
    for error in errors:
        # Report the most specific failure under a branching keyword rather than "not valid under any".
        leaf = best_match([error]) if not error.context else error
        out.append(InputError(_explain(leaf), file=file, path=json_path(leaf.absolute_path)))
    return out
