"""The cases of a suite file that a -k expression selects: what every device step picks its cases by."""

from __future__ import annotations

import shutil
from pathlib import Path

from ddbench.inputs.suite_file import load_suite_file
from ddbench.suite import Case
from ddbench.suite.select import case_filter


def suite_cases(path: str, expression: str | None) -> list[Case]:
    keep = case_filter(expression or None)
    return [c for c in load_suite_file(path).cases if keep(c)]


def find_cuda_tool(name: str) -> str | None:
    """A CUDA tool (ncu, compute-sanitizer) on PATH, else in /usr/local/cuda/bin or /opt/nvidia/*/."""
    found = shutil.which(name)
    if found:
        return found
    candidates = [Path("/usr/local/cuda/bin") / name, *sorted(Path("/opt/nvidia").glob(f"*/*/{name}"))]
    return next((str(c) for c in candidates if c.is_file()), None)
