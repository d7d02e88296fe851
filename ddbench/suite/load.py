"""Read a suite file: JSON, then the schema, then expansion and semantic checks. The only I/O of `suite/`.

`read_json` is the one reader of every JSON file the tool takes (suites, results, baselines): whatever a
file holds, it ends in a value or an InputError (exit 2), in bounded time and memory; a value holds no NaN
or infinite number.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ddbench.bounded_read import read_regular_file, size_limit
from ddbench.errors import InputError, SuiteInvalid
from ddbench.finite import nonfinite_path
from ddbench.suite.captures import CaptureInfo, CaptureLoader
from ddbench.suite.case_count import DEFAULT_MAX_CASES, check_case_count, too_many_cases
from ddbench.suite.checkpoints import CheckpointInfo, CheckpointLoader
from ddbench.suite.expand import RawCase, expand_document
from ddbench.suite.ids import workload_digest
from ddbench.suite.model import Suite
from ddbench.suite.resolve import resolve_capture_case, resolve_case
from ddbench.suite.schema import schema_errors

# A results file of a large suite with saved figures runs to tens of MB; 512 MiB leaves room for merges of
# many shards while keeping a mistaken path (a disk image, a log) from filling memory.
MAX_JSON_BYTES = 512 << 20
MAX_JSON_BYTES_ENV = "DDBENCH_MAX_JSON_BYTES"
MAX_JSON_DEPTH = 100  # suites nest about 6 levels, results about 8: deeper is not a ddbench document
MAX_INT_DIGITS = 100  # seeds and byte counts need 20; longer integers only cost time and overflow floats


class _IntegerTooLong(ValueError):
    pass


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _IntegerTooLong(len(text.lstrip("-")))
    return int(text)


def _too_deep(value: Any) -> bool:
    """Nesting past MAX_JSON_DEPTH, found without recursion (so the check itself cannot overflow)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return True
        if isinstance(item, dict):
            stack += [(v, depth + 1) for v in item.values() if isinstance(v, dict | list)]
        elif isinstance(item, list):
            stack += [(v, depth + 1) for v in item if isinstance(v, dict | list)]
    return False


def read_json(path: Path, *, what: str = "JSON file", max_bytes: int | None = None) -> Any:
    """Parse a JSON file: a regular file within the size limit, integers of sane length, sane nesting."""
    limit = size_limit(os.environ, MAX_JSON_BYTES_ENV, MAX_JSON_BYTES) if max_bytes is None else max_bytes
    data = read_regular_file(
        path,
        what=what,
        max_bytes=limit,
        raise_with=f"set {MAX_JSON_BYTES_ENV}, e.g. {MAX_JSON_BYTES_ENV}=2G, to raise it",
    )
    file = str(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"cannot read: not UTF-8 text (byte {err.start})", file=file) from None
    try:
        value = json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as err:
        raise InputError(
            f"not valid JSON: {err.msg} at line {err.lineno} column {err.colno}", file=file
        ) from None
    except _IntegerTooLong as err:
        raise InputError(
            f"not valid JSON for ddbench: an integer of {err.args[0]} digits (at most {MAX_INT_DIGITS})",
            file=file,
        ) from None
    except RecursionError:
        raise InputError(
            f"not valid JSON for ddbench: nested deeper than {MAX_JSON_DEPTH} levels", file=file
        ) from None
    except ValueError as err:  # what else the decoder refuses (e.g. a number it cannot convert)
        raise InputError(f"not valid JSON: {err}", file=file) from None
    if _too_deep(value):
        raise InputError(f"not valid JSON for ddbench: nested deeper than {MAX_JSON_DEPTH} levels", file=file)
    refuse_nonfinite(value, file)
    return value


def refuse_nonfinite(value: Any, file: str) -> None:
    """InputError naming the field of the first NaN or Infinity (or 1e400) in a parsed document: no figure,
    limit or count of ours is ever one, and a NaN compared with anything makes a gate pass."""
    if found := nonfinite_path(value):
        path, number = found
        raise InputError(
            f"is {number}: not a finite number (NaN and Infinity are not JSON numbers)",
            file=file,
            path=path or None,
        )


def _no_captures(name: str) -> list[CaptureInfo]:
    raise InputError("captures are replayed from suite files only (their paths are relative to the file)")


def _no_checkpoints(name: str, layers: int | None) -> CheckpointInfo:
    raise InputError("checkpoints are read from suite files only (their paths are relative to the file)")


def parse_suite(
    document: Any,
    file: str,
    captures: CaptureLoader = _no_captures,
    *,
    max_cases: int = DEFAULT_MAX_CASES,
    checkpoints: CheckpointLoader = _no_checkpoints,
) -> Suite:
    """Validate and expand an already-parsed document; raises SuiteInvalid listing every problem.

    `captures` reads the capture files that cases name, `checkpoints` the checkpoint folders of generation
    cases (ddbench.inputs.suite_file passes ones rooted at the suite's folder). A document that would expand
    past `max_cases` is refused before it is expanded.
    """
    errors = schema_errors(document, file)
    if errors:
        raise SuiteInvalid(errors)
    check_case_count(document, file, max_cases)
    cases, first_seen, id_seen = [], {}, {}
    for count, (raw, case, problems) in enumerate(
        _resolved(expand_document(document), document["name"], file, captures, checkpoints), start=1
    ):
        if count > max_cases:  # capture folders add a case per file
            raise too_many_cases(count, max_cases, file, raw.where)
        errors += problems
        if case is None:
            continue
        key = workload_digest(case)  # two labels on one workload are still one workload
        if key in first_seen:
            errors.append(
                InputError(
                    f"case {case.id} repeats the workload of {first_seen[key]}; results are keyed by it",
                    file=file,
                    path=raw.where,
                )
            )
            continue
        if case.id in id_seen:  # distinct workloads whose readable parts and 32-bit suffixes agree
            errors.append(
                InputError(
                    f"case {case.id} has the same ID as the different workload of {id_seen[case.id]}; "
                    "results are keyed by ID: give one of them a label",
                    file=file,
                    path=raw.where,
                )
            )
            continue
        first_seen[key] = id_seen[case.id] = raw.where
        cases.append(case)
    if errors:
        # A bad default fails every case it reaches; say it once.
        unique = {(e.path, e.reason): e for e in errors}
        raise SuiteInvalid(list(unique.values()))
    return Suite(
        name=document["name"], description=document.get("description", ""), path=file, cases=tuple(cases)
    )


def _checkpoint(
    raw: RawCase, file: str, checkpoints: CheckpointLoader
) -> tuple[CheckpointInfo | None, list[InputError]]:
    """The checkpoint a generation case names, read through the loader; its problem tied to the field."""
    spec = raw.fields.get("generation")
    if not isinstance(spec, dict) or "checkpoint" not in spec:
        return None, []
    name, layers = spec["checkpoint"], spec.get("layers")
    try:
        return checkpoints(name, layers), []
    except InputError as err:
        # err.message keeps the checkpoint's file and the field or tensor the reader blamed.
        at = raw.origin("generation") + ".checkpoint"
        return None, [InputError(f"checkpoint {name!r}: {err.message}", file=file, path=at)]


def _resolved(
    raws: list[RawCase], suite: str, file: str, captures: CaptureLoader, checkpoints: CheckpointLoader
):
    """(raw, case or None, problems) per case; a capture entry becomes one case per capture file."""
    for raw in raws:
        name = raw.fields.get("capture")
        if name is None:
            checkpoint, problems = _checkpoint(raw, file, checkpoints)
            if problems:
                yield raw, None, problems
                continue
            cases, problems = resolve_case(raw, suite, file, checkpoint)
            for case in cases or (None,):  # a CUDA-graph group is several cases
                yield raw, case, problems
                problems = []
            continue
        try:
            infos = captures(name)
        except InputError as err:
            # err.message keeps the capture file and the tensor or metadata field the reader blamed.
            yield (
                raw,
                None,
                [InputError(f"capture {name!r}: {err.message}", file=file, path=raw.origin("capture"))],
            )
            continue
        for info in infos:
            yield (raw, *resolve_capture_case(raw, suite, file, info))


def load_suite(
    path: str | Path,
    captures: CaptureLoader = _no_captures,
    *,
    max_cases: int = DEFAULT_MAX_CASES,
    checkpoints: CheckpointLoader = _no_checkpoints,
) -> Suite:
    """Read and parse one suite file; `captures` reads the files its capture entries name, `checkpoints`
    the folders its generation cases name."""
    path = Path(path)
    document = read_json(path, what="suite file")
    return parse_suite(document, str(path), captures, max_cases=max_cases, checkpoints=checkpoints)
