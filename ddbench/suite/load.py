"""Read a suite file: JSON, then the schema, then expansion and semantic checks. The only I/O of `suite/`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ddbench.errors import InputError, SuiteInvalid
from ddbench.suite.captures import CaptureInfo, CaptureLoader
from ddbench.suite.expand import RawCase, expand_document
from ddbench.suite.ids import workload_hash
from ddbench.suite.model import CaptureRef, Suite
from ddbench.suite.resolve import resolve_capture_case, resolve_case
from ddbench.suite.schema import schema_errors


def read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", file=str(path)) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a suite file", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read: {err}", file=str(path)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(
            f"not valid JSON: {err.msg} at line {err.lineno} column {err.colno}", file=str(path)
        ) from None


def _no_captures(name: str) -> list[CaptureInfo]:
    raise InputError("captures are replayed from suite files only (their paths are relative to the file)")


def parse_suite(document: Any, file: str, captures: CaptureLoader = _no_captures) -> Suite:
    """Validate and expand an already-parsed document; raises SuiteInvalid listing every problem.

    `captures` reads the capture files that cases name (load_suite passes one rooted at the suite's folder).
    """
    errors = schema_errors(document, file)
    if errors:
        raise SuiteInvalid(errors)
    cases, first_seen = [], {}
    for raw, case, problems in _resolved(expand_document(document), document["name"], file, captures):
        errors += problems
        if case is None:
            continue
        key = workload_hash(case)  # two labels on one workload are still one workload
        if key in first_seen:
            errors.append(
                InputError(
                    f"case {case.id} repeats the workload of {first_seen[key]}; results are keyed by it",
                    file=file,
                    path=raw.where,
                )
            )
            continue
        first_seen[key] = raw.where
        cases.append(case)
    if errors:
        # A bad default fails every case it reaches; say it once.
        unique = {(e.path, e.reason): e for e in errors}
        raise SuiteInvalid(list(unique.values()))
    return Suite(
        name=document["name"], description=document.get("description", ""), path=file, cases=tuple(cases)
    )


def _resolved(raws: list[RawCase], suite: str, file: str, captures: CaptureLoader):
    """(raw, case or None, problems) per case; a capture entry becomes one case per capture file."""
    for raw in raws:
        name = raw.fields.get("capture")
        if name is None:
            yield (raw, *resolve_case(raw, suite, file))
            continue
        try:
            infos = captures(name)
        except InputError as err:
            reason = f"{err.file}: {err.reason}" if err.file else err.reason
            yield (
                raw,
                None,
                [InputError(f"capture {name!r}: {reason}", file=file, path=raw.origin("capture"))],
            )
            continue
        for info in infos:
            yield (raw, *resolve_capture_case(raw, suite, file, info))


def load_suite(path: str | Path) -> Suite:
    path = Path(path)
    return parse_suite(read_json(path), str(path), file_loader(path.parent))


def file_loader(base: Path) -> CaptureLoader:
    """Read captures named relative to `base` (the suite file's folder); a folder means all of its files."""
    cache: dict[Path, CaptureInfo] = {}

    def load(name: str) -> list[CaptureInfo]:
        # ddbench.capture reads tensors with ddbench.inputs, which uses suite.presets: import at call time.
        from ddbench.capture.read import read_capture
        from ddbench.capture.summary import capture_files

        out = []
        for path in capture_files([base / name]):
            if path not in cache:
                capture = read_capture(path)
                x = capture.inputs
                cache[path] = CaptureInfo(
                    ref=CaptureRef(str(path), hashlib.sha256(path.read_bytes()).hexdigest()),
                    stem=path.name.removesuffix(".safetensors"),
                    model=capture.metadata.get("model"),
                    heads=x.num_heads,
                    sm_scale=x.sm_scale,
                    batch_size=x.batch_size,
                    prefix_lens=tuple(x.prefix_lens),
                    q_len=max(x.q_lens),
                    page_size=x.page_size,
                    parents=tuple(x.trees[0].parents) if x.trees else None,
                )
            out.append(cache[path])
        return out

    return load
