"""Turn a suite document into raw case dicts: defaults, then each entry, then each point of its matrix.

Each field remembers the JSON path it came from, so a semantic error can point at the line to fix.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# Object-valued fields whose keys merge level by level; every other field is replaced whole.
MERGED_FIELDS = ("layout", "inputs", "budget")


@dataclass
class RawCase:
    fields: dict[str, Any]
    origins: dict[str, str]  # field -> JSON path of the value in the suite file
    entry: str  # JSON path of the suite entry that produced the case

    def origin(self, field: str) -> str:
        return self.origins.get(field, self.entry)

    @property
    def where(self) -> str:
        """The entry, narrowed to its matrix point: `cases[0].matrix.tree[1]`, or several joined by +."""
        points = [path for path in self.origins.values() if ".matrix." in path or path.startswith("matrix.")]
        return " + ".join(sorted(points)) or self.entry


def _overlay(base: RawCase, values: dict[str, Any], path_of: dict[str, str]) -> RawCase:
    fields, origins = dict(base.fields), dict(base.origins)
    for key, value in values.items():
        if key == "matrix":
            continue
        if key in MERGED_FIELDS and isinstance(fields.get(key), dict):
            fields[key] = {**fields[key], **value}
        elif key == "tags":
            fields[key] = list(dict.fromkeys([*fields.get(key, []), *value]))
        else:
            fields[key] = value
        origins[key] = path_of[key]
    return RawCase(fields, origins, base.entry)


def _matrix_points(matrix: dict[str, list[Any]], at: str) -> Iterator[tuple[dict[str, Any], dict[str, str]]]:
    keys = list(matrix)
    for combo in itertools.product(*(enumerate(matrix[k]) for k in keys)):
        values = {k: v for k, (_, v) in zip(keys, combo, strict=True)}
        paths = {k: f"{at}.{k}[{i}]" for k, (i, _) in zip(keys, combo, strict=True)}
        yield values, paths


def expand_document(document: dict[str, Any]) -> list[RawCase]:
    defaults = document.get("defaults", {})
    base = _overlay(RawCase({}, {}, "defaults"), defaults, {k: f"defaults.{k}" for k in defaults})
    entries: list[tuple[str, dict[str, Any]]] = []
    if "matrix" in document:
        entries.append(("(top level)", {"matrix": document["matrix"]}))
    entries += [(f"cases[{i}]", entry) for i, entry in enumerate(document.get("cases", []))]

    out: list[RawCase] = []
    for at, entry in entries:
        prefix = "" if at == "(top level)" else f"{at}."
        fixed = _overlay(RawCase(base.fields, base.origins, at), entry, {k: f"{prefix}{k}" for k in entry})
        matrix = entry.get("matrix")
        if not matrix:
            out.append(fixed)
            continue
        for values, paths in _matrix_points(matrix, f"{prefix}matrix"):
            out.append(_overlay(fixed, values, paths))
    return out
