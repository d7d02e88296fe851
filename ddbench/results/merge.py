"""Merging the results files of shards (`ddbench run --shard i/n`) into one (pure).

Cases are concatenated in input order and keyed by ID, so a case in two inputs is refused rather than
silently shadowed: it would mean two shards of different splits, or a file given twice. The merged file is
complete only if every shard was; it keeps the first shard's environment as its own and every shard's
environment under `shards`, since shards may have run on different machines. Each input records its shard
(`i/n`); the merge checks the set: inputs of different splits are refused, and shards of the split that no
input covered are listed under `missing_shards` and leave the merge incomplete. Each case's status, and so
the summary and the verdict, is recomputed from what the case holds (its pairs, backends and latency).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddbench.errors import InputError
from ddbench.results.case_result import case_status_of
from ddbench.results.document import FORMAT, FORMAT_VERSION, summary_of


def _shards_of(file: str, document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An input's own shard record, or the records it carries when it is itself a merge."""
    if document.get("shards"):
        return [dict(s) for s in document["shards"]]
    return [
        {
            "file": file,
            "started": document["started"],
            "finished": document["finished"],
            "complete": document["complete"],
            "shard": document.get("shard"),
            "filter": document.get("filter"),
            "suites": list(document["suites"]),
            "cases": len(document["cases"]),
            "environment": document["environment"],
        }
    ]


def merge_results(inputs: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """`inputs`: (file name, results document) pairs, already validated; InputError on a repeated case."""
    if not inputs:
        raise InputError("nothing to merge")
    owner: dict[str, str] = {}
    cases: list[dict[str, Any]] = []
    for file, document in inputs:
        for case in document["cases"]:
            if case["id"] in owner:
                where = (
                    f"twice in {file}" if owner[case["id"]] == file else f"in {owner[case['id']]} and {file}"
                )
                raise InputError(f"case {case['id']} is {where}; shards must not overlap", file=file)
            owner[case["id"]] = file
            # The status is recomputed from the case's pairs, backends and latency: a file's own word (a
            # "pass" over a failing pair, hand-edited or from a buggy writer) is not taken on trust.
            cases.append({**case, "status": case_status_of(case)})
    documents = [d for _, d in inputs]
    shards = [shard for file, d in inputs for shard in _shards_of(file, d)]
    missing = _missing_shards(shards)
    finished = [d["finished"] for d in documents]
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "started": min(d["started"] for d in documents),
        "finished": max(finished) if all(finished) else None,
        "complete": all(d["complete"] for d in documents) and not missing,
        "suites": list(dict.fromkeys(s for d in documents for s in d["suites"])),
        "environment": documents[0]["environment"],
        "summary": summary_of(cases),
        "cases": cases,
        "shard": None,
        "missing_shards": missing,
        "shards": shards,
    }


def _missing_shards(shards: Sequence[Mapping[str, Any]]) -> list[str]:
    """Shards `i/n` of the inputs' split that none covers; InputError when inputs mix splits."""
    specs = [s.get("shard") for s in shards]
    if not any(specs):
        return []
    if not all(specs):
        unsharded = [s["file"] for s in shards if not s.get("shard")]
        raise InputError(f"mixes whole runs ({', '.join(unsharded)}) with shards of a split", path="merge")
    counts = {int(spec.split("/")[1]) for spec in specs}
    if len(counts) != 1:
        raise InputError(f"mixes shards of different splits: {', '.join(sorted(set(specs)))}", path="merge")
    splits = {(tuple(s["suites"]), s.get("filter")) for s in shards}
    if len(splits) != 1:
        raise InputError("shards of different runs: their suites or -k filters differ", path="merge")
    (count,) = counts
    covered = {int(spec.split("/")[0]) for spec in specs}
    return [f"{i}/{count}" for i in range(1, count + 1) if i not in covered]
