"""Facts about the machine and libraries, recorded with every result (and shown by `ddbench env`)."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

PACKAGES = ("ddbench", "torch", "triton", "sglang", "numpy")


def package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def device_facts() -> dict[str, Any]:
    if not torch.cuda.is_available():
        return {
            "kind": "cpu",
            "name": platform.processor() or platform.machine(),
            "machine": platform.machine(),
            "cuda": None,
        }
    props = torch.cuda.get_device_properties(0)
    return {
        "kind": "cuda",
        "name": props.name,
        "capability": f"sm_{props.major}{props.minor}",
        "memory_gib": round(props.total_memory / 2**30, 1),
        "sms": props.multi_processor_count,
        "cuda": torch.version.cuda,
    }


def git_commit(start: Path | None = None) -> str | None:
    """HEAD of the repository here, or `DDBENCH_GIT_COMMIT` where it is a commit's hex name: a copy of a
    working tree (the device tool's) may carry a .git that is not the one it was copied from, and report an
    older commit."""
    named = os.environ.get("DDBENCH_GIT_COMMIT", "").strip().lower()
    if re.fullmatch(r"[0-9a-f]{7,40}", named):
        return named
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=start or Path.cwd(),
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": device_facts(),
        "packages": {name: package_version(name) for name in PACKAGES},
        "git_commit": git_commit(),
    }
