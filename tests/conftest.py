"""Test-session set-up: on a machine without CUDA, Triton runs SGLang's kernel under its interpreter, which
Triton decides when a kernel is first decorated — so the variable is set before any test module imports it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


SMOKE = Path(__file__).resolve().parents[1] / "suites" / "smoke.json"


@pytest.fixture(scope="session")
def smoke_cases():
    from ddbench.inputs.suite_file import load_suite_file

    return list(load_suite_file(SMOKE).cases)


# The smoke cases the model-baseline tests write baselines of, and the parity those baselines need.
PICK = "ddtree and p21"


@pytest.fixture(scope="session")
def parity_results(tmp_path_factory):
    """A normal run of the picked smoke cases, as `ddbench run --json` writes it: the kernel parity a model
    baseline is written after (`--parity-from`). Made once per test process."""
    from click.testing import CliRunner

    from ddbench.cli.main import cli

    path = tmp_path_factory.mktemp("run") / "results.json"
    result = CliRunner().invoke(cli, ["run", str(SMOKE), "-k", PICK, "--json", str(path)])
    assert result.exit_code == 0, result.output[-2000:]
    return path


def smoke_case(cases, label: str):
    """The one smoke case whose ID starts with `label` (tests name cases by their readable start)."""
    found = [c for c in cases if c.id.startswith(label)]
    assert len(found) == 1, f"smoke.json should hold exactly one case {label}*, found {[c.id for c in found]}"
    return found[0]


def one_case(**fields):
    """A single Kimi TP8 case (prefix 21, DDTree budget 8) with `fields` overridden."""
    from ddbench.suite import parse_suite

    entry = {"model": "kimi-k2.6", "layout": {"tp": 8}, "prefix": 21, "tree": {"kind": "ddtree", "budget": 8}}
    entry.update(fields)
    return parse_suite({"name": "t", "cases": [entry]}, "test").cases[0]


def ancestors(parents: tuple[int, ...]) -> torch.Tensor:
    """[i, j] iff j is i or one of its ancestors, by walking each parent chain (not Tree.ancestor_mask)."""
    n = len(parents)
    vis = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j != -1:
            vis[i, j] = True
            j = parents[j]
    return vis
