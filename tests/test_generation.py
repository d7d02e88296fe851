"""End-to-end generation cases: the pool, the acceptance, the tie-aware gate, and whole runs through the CLI.

The small suite here is the CI-sized cousin of suites/e2e.json (one layer, 8 tokens a request): a correct
kernel passes every gate, each of the self-test's mutant kernels fails at least one, and a drafter that
stopped being accepted fails the accept-length gate while everything else passes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import jsonschema
import pytest
import torch
from click.testing import CliRunner

from ddbench.cli.main import cli
from ddbench.explain.mutants import EMU_PREFIX, mutant_names
from ddbench.generation.drafter import DraftTree
from ddbench.generation.eagle_tree import SglangEagleTree, eagle_selection, tree_of_selection
from ddbench.generation.greedy_accept import SglangGreedyAccept, accept_greedy
from ddbench.generation.kv_pool import PagedKvPool
from ddbench.metrics.generation_gates import agreement
from ddbench.trees import Tree

SCHEMA = json.loads((Path(__file__).parents[1] / "ddbench/results/results.schema.json").read_text())
# Mistakes these small inputs cannot show: the kernel keeps the last 2,048 prefix keys (suites/e2e.json's
# `long` case catches it).
NEEDS_LONG_PREFIX = {"prefix-truncated"}


def _suite(tmp_path: Path, **fields: object) -> Path:
    case = {
        "label": "small",
        "model": "kimi-k2.6",
        "layout": {"tp": 8},
        "batch_size": 2,
        "prefix": [9, 17],
        "page_size": 4,
        "seed": 3,
        "tree": {"kind": "ddtree", "budget": 8},
        "generation": {"layers": 1, "hidden": 128, "vocab": 256, "new_tokens": 8, "min_accept_length": 1.5},
        "backends": ["reference-fp64", "cuda-emu"],
        "parity": [{"candidate": "*", "against": "reference-fp64", "max_logit_abs": 0.25}],
    }
    for key, value in fields.items():
        case[key] = value
    path = tmp_path / "e2e-small.json"
    path.write_text(json.dumps({"name": "e2e-small", "cases": [case]}))
    return path


def _run(tmp_path: Path, suite: Path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "results.json"
    result = CliRunner().invoke(cli, ["run", str(suite), "--json", str(out), *extra])
    assert "Traceback" not in result.output, result.output
    document = json.loads(out.read_text())
    jsonschema.validate(document, SCHEMA)
    return result.exit_code, document


def _random_batch(rng: random.Random) -> tuple[list[DraftTree], list[list[int]]]:
    drafts, predicts = [], []
    for _ in range(3):
        n = rng.randint(1, 24)
        parents = [-1] + [rng.randint(0, i - 1) for i in range(1, n)]
        tokens, taken = [rng.randint(0, 3)], set()
        for i in range(1, n):
            token = rng.randint(0, 3)
            while (parents[i], token) in taken:  # siblings carry distinct tokens, as every drafter's do
                token = rng.randint(4, 99)
            taken.add((parents[i], token))
            tokens.append(token)
        drafts.append(DraftTree(Tree(tuple(parents)), tuple(tokens)))
        predicts.append([rng.randint(0, 3) for _ in range(n)])
    return drafts, predicts


def test_our_greedy_walk_accepts_what_sglangs_verify_op_accepts():
    sglang = SglangGreedyAccept()
    if sglang.problem:
        pytest.skip(f"SGLang's verify_tree_greedy is unavailable here: {sglang.problem}")
    rng = random.Random(11)
    for _ in range(25):
        drafts, predicts = _random_batch(rng)
        ours = [accept_greedy(d, p) for d, p in zip(drafts, predicts, strict=True)]
        assert sglang(drafts, predicts) == ours


def test_our_eagle_tree_is_the_one_sglangs_build_op_makes():
    """SGLang's tree build (under Triton's interpreter) and ours, from the same beam-search selections: the
    same parents (through its retrieve arrays), tree mask with prefix columns, and positions."""
    sglang = SglangEagleTree()
    if sglang.problem:
        pytest.skip(f"SGLang's tree build is unavailable here: {sglang.problem}")
    rng = random.Random(5)
    shapes = set()
    for trial in range(30):
        topk, steps = rng.choice([1, 2, 3, 4]), rng.randint(1, 5)
        candidates = topk + (steps - 1) * topk * topk
        nodes = rng.randint(2, min(candidates, 16) + 1)
        g = torch.Generator().manual_seed(trial)
        table: dict[tuple[int, ...], torch.Tensor] = {}

        def children(path, table=table, g=g):
            if path not in table:  # a peaked distribution, as a drafter's: beams differ in score
                table[path] = torch.softmax(torch.randn(50, generator=g) * 3, -1)
            return table[path]

        selection = eagle_selection(topk, steps, nodes, children)
        seq_len = rng.randint(0, 9)
        built = sglang._run(selection, seq_len)  # the op itself at this length, not a shifted cached build
        shifted = sglang(selection, seq_len)  # built once at length 0, then shifted
        assert shifted.tree == built.tree and shifted.positions == built.positions
        assert torch.equal(shifted.mask, built.mask)
        tree = tree_of_selection(selection)
        assert built.tree.parents == tree.parents
        want = torch.ones(tree.q_len, seq_len + tree.q_len, dtype=torch.bool)
        want[:, seq_len:] = tree.ancestor_mask()
        assert torch.equal(built.mask, want) and built.positions == tree.positions(seq_len)
        shapes.add((topk, tree.max_depth))
    assert len(shapes) >= 10  # wide and deep trees both met


@pytest.mark.parametrize("page_size", [1, 4])
def test_pool_keeps_accepted_rows_in_order_poisons_the_rest_and_reuses_them(page_size):
    pool = PagedKvPool(layers=2, pages=64, page_size=page_size, seed=5, device=torch.device("cpu"))
    r = pool.add_request()
    pool.reserve(r, 3 + 6)
    rows = pool.slots(r, 0, 9)
    assert len(set(rows.tolist())) == 9
    for layer in range(2):
        pool.write(layer, rows, torch.arange(9, dtype=torch.bfloat16)[:, None].expand(9, 576) + layer)
    pool.keep(r, 3, [0, 2, 5])  # the root and two accepted drafts of a 6-token tree after 3 committed
    kept = pool.slots(r, 0, 6)
    for layer in range(2):
        values = pool.k_buffers[layer][kept, 0, 0].float().tolist()
        assert values == [v + layer for v in (0, 1, 2, 3, 5, 8)]
    freed = sorted(set(rows.tolist()) - set(kept.tolist()))
    assert freed and torch.isnan(pool.k_buffers[0][freed].float()).all()
    other = pool.add_request()
    pool.reserve(other, 1)
    page = pool.slots(other, 0, 1).item() // page_size
    assert page in {s // page_size for s in freed}  # a freed page is the next one handed out


def test_agreement_parts_only_on_a_near_tie_and_stops_there():
    tokens = [[1, 2, 3, 4], [5, 6]]
    wide = [[9.0] * 4, [9.0] * 2]
    same = agreement(tokens, wide, tokens, wide, tau=0.05)
    assert (same.compared, same.total, same.divergence) == (6, 6, None)
    parted = [[1, 2, 7, 4], [5, 6]]
    near = [[9.0, 9.0, 0.01, 9.0], [9.0, 9.0]]
    tie = agreement(tokens, near, parted, near, tau=0.05)
    assert tie.tie and tie.divergence == (0, 2) and tie.compared == 4  # 2 of request 0, both of request 1
    one_sided = [[9.0, 9.0, 0.3, 9.0], [9.0, 9.0]]
    real = agreement(tokens, one_sided, parted, near, tau=0.05)
    assert not real.tie and real.divergence == (0, 2)
    short = agreement(tokens, wide, [[1, 2], [5, 6]], wide, tau=0.05)
    assert not short.tie and short.divergence == (0, 2)


def test_a_correct_kernel_passes_every_gate_and_each_gate_reports_its_figures(tmp_path):
    code, document = _run(tmp_path, _suite(tmp_path))
    assert code == 0 and document["summary"]["pass"] == 1
    case = document["cases"][0]
    pair = next(p for p in case["pairs"] if p["candidate"] == "cuda-emu")
    gates = {g["gate"]: g for g in pair["gates"]}
    assert set(gates) == {"teacher_forced", "tokens_vs_greedy", "tokens_vs_reference-fp64", "accept_length"}
    assert all(g["status"] == "pass" for g in gates.values())
    assert 0 < gates["teacher_forced"]["figures"]["max_logit_abs"] < 0.25
    assert gates["tokens_vs_greedy"]["figures"]["total"] == 16
    runs = case["generation"]["runs"]
    assert runs["cuda-emu"]["tokens"] == [8, 8] and runs["cuda-emu"]["mean_accept_length"] >= 1.5


@pytest.mark.slow
def test_every_mutant_kernel_fails_a_gate(tmp_path):
    mutants = [n for n in mutant_names(True) if n.startswith(EMU_PREFIX)]
    testable = [n for n in mutants if n.removeprefix(EMU_PREFIX) not in NEEDS_LONG_PREFIX]
    assert len(testable) >= 15
    code, document = _run(tmp_path, _suite(tmp_path), "--backends", ",".join(["reference-fp64", *testable]))
    assert code == 1
    verdicts = {p["candidate"]: p for p in document["cases"][0]["pairs"]}
    passed = [n for n in testable if verdicts[n]["status"] == "pass"]
    assert not passed, f"mutants no gate caught: {passed}"
    for name in testable:  # caught by a gate, or an error (NaN from a poisoned pool row) that names the step
        pair = verdicts[name]
        assert pair["status"] == "error" or any(g["status"] == "fail" for g in pair["gates"]), pair


def test_a_drafter_that_stopped_being_accepted_fails_the_accept_gate_alone(tmp_path):
    generation = {"layers": 1, "hidden": 128, "vocab": 256, "new_tokens": 8, "drafter_noise": 50.0}
    code, document = _run(tmp_path, _suite(tmp_path, generation=generation | {"min_accept_length": 1.5}))
    assert code == 1
    pair = next(p for p in document["cases"][0]["pairs"] if p["candidate"] == "cuda-emu")
    failed = [g["gate"] for g in pair["gates"] if g["status"] == "fail"]
    assert failed == ["accept_length"], pair["gates"]


@pytest.mark.parametrize(
    ("fields", "where", "reason"),
    [
        ({"tree": {"kind": "star", "size": 5}}, "tree", "drafts ddtree, eagle, chain"),
        ({"prefix": [1, 17]}, "prefix", "at least 2"),
        (
            {"parity": [{"candidate": "*", "against": "reference-fp64", "max_row_ulp": 3}]},
            "parity",
            "max_row_ulp do not apply to a generation case",
        ),
        ({"budget": {"timed": ["cuda-emu"]}}, "budget", "judged by its gates"),
        ({"parity": None}, "parity", "needs parity bounds"),
    ],
)
def test_a_bad_generation_case_is_refused_naming_the_field(tmp_path, fields, where, reason):
    suite = _suite(tmp_path, **fields)
    if fields.get("parity", 0) is None:
        document = json.loads(suite.read_text())
        del document["cases"][0]["parity"]
        suite.write_text(json.dumps(document))
    result = CliRunner().invoke(cli, ["run", str(suite)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert where in result.output and reason in result.output, result.output
