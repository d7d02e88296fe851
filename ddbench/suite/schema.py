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


_JSON_TYPE = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}


def _type_name(value: Any) -> str:
    return "null" if value is None else _JSON_TYPE.get(type(value), type(value).__name__)


def _branch_leaf(error: ValidationError) -> ValidationError | str:
    """Under oneOf/anyOf: the branch meant for this kind of value, or a sentence naming the accepted kinds."""
    branches: dict[int, list[ValidationError]] = {}
    for sub in error.context or ():
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    if all(sub.validator == "required" for sub in error.context or ()):
        needed = sorted({sub.message.split("'")[1] for sub in error.context})
        return "needs one of the fields " + ", ".join(repr(n) for n in needed)
    # A branch whose only complaint is the value's type was meant for another kind of value.
    fitting = [
        subs for subs in branches.values() if not any(s.validator == "type" and not s.path for s in subs)
    ]
    if len(fitting) == 1:
        return best_match(fitting[0])
    kinds = sorted(
        {str(s.validator_value) for s in error.context or () if s.validator == "type" and not s.path}
    )
    return f"expected {' or '.join(kinds) or 'another form'}, got {_type_name(error.instance)}"


def _explain(error: ValidationError) -> tuple[ValidationError, str] | None:
    """The error to point at and what to say, in words a suite author reads; None for an echo of another."""
    if error.validator in ("oneOf", "anyOf") and error.context:
        leaf = _branch_leaf(error)
        return (error, leaf) if isinstance(leaf, str) else _explain(leaf)
    if error.validator in ("additionalProperties", "unevaluatedProperties"):
        known = sorted(
            {*error.schema.get("properties", {}), *suite_schema()["$defs"]["case_fields"]["properties"]}
        )
        if error.validator == "additionalProperties":
            known = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(known)) if isinstance(error.instance, dict) else []
        if not unknown:
            return None  # unevaluatedProperties repeating a nested failure: that failure is reported itself
        return error, f"unknown field {', '.join(map(repr, unknown))}; known fields: {', '.join(known)}"
    if error.validator == "enum":
        allowed = ", ".join(json.dumps(v) for v in error.validator_value)
        return error, f"{json.dumps(error.instance)} is not one of {allowed}"
    if error.validator in ("maxItems", "minItems"):
        bound = "at most" if error.validator == "maxItems" else "at least"
        return error, f"has {len(error.instance)} items; expected {bound} {error.validator_value}"
    return error, error.message


def schema_errors(document: Any, file: str) -> list[InputError]:
    validator = jsonschema.Draft202012Validator(suite_schema())
    errors = sorted(
        validator.iter_errors(document), key=lambda e: (list(map(str, e.absolute_path)), e.message)
    )
    out: list[InputError] = []
    for error in errors:
        explained = _explain(error)
        if explained is not None:
            leaf, reason = explained
            out.append(InputError(reason, file=file, path=json_path(leaf.absolute_path)))
    return out
