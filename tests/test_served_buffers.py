"""Buffers as a live SGLang server passes them: over-allocated kv_indices, custom_mask and out_cache_loc whose
tails hold garbage, and a launch prepared once for the buffers' capacity, replayed at other lengths."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from conftest import one_case

from ddbench.backends import get_backend
from ddbench.backends.cuda_emu import CudaEmuBackend
from ddbench.backends.protocol import replayable
from ddbench.cli.main import cli
from ddbench.errors import InputError, SuiteInvalid
from ddbench.explain.mutants import get_mutant
from ddbench.inputs import check_inputs, generate_inputs
from ddbench.inputs.capture_file import read_capture
from ddbench.inputs.layout import VerifyInputs
from ddbench.inputs.served_buffers import garbage_slots, over_allocated
from ddbench.kernel.marshal import marshal
from ddbench.metrics import PASS, judge, parity_figures
from ddbench.runner.graph_group import GraphGroup
from ddbench.suite import parse_suite

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_CAPTURE = ROOT / "suites" / "captures" / "k26-tp8-bs2-p23-61-eagle.safetensors"


def small_call(prefix=(5, 40), seed=3) -> VerifyInputs:
    case = one_case(batch_size=2, prefix=list(prefix), seed=seed)
    return generate_inputs(case)


def with_tails(x: VerifyInputs, kind: str, extra: int = 29) -> VerifyInputs:
    """x's call with `extra` entries after the meaningful ones of each over-allocatable tensor."""
    g = torch.Generator().manual_seed(7)
    pool = x.k_buffer.shape[0]
    slots = {
        "zeros": torch.zeros(extra, dtype=torch.int64),
        "past-pool": pool + torch.arange(extra, dtype=torch.int64),
        "nan-rows": torch.zeros(extra, dtype=torch.int64),  # slot 0: a NaN row of every generated pool
        "mixed": garbage_slots(extra, pool, g),
    }[kind]
    assert bool(x.k_buffer[0].isnan().all())
    mask_tail = torch.randint(0, 2, (extra * 7,), generator=g).bool()
    return dataclasses.replace(
        x,
        kv_indices=torch.cat([x.kv_indices, slots]),
        out_cache_loc=torch.cat([x.out_cache_loc, slots[:5]]),
        custom_mask=torch.cat([x.custom_mask, mask_tail]),
    )


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


@pytest.mark.parametrize("name", ["reference", "reference-fp64", "triton", "cuda-emu"])
def test_every_backend_gives_the_exact_calls_bits_on_garbage_tails(name):
    x = small_call()
    backend = get_backend(name)
    x.fresh_output()
    exact = backend.run(x).clone()
    for kind in ("zeros", "past-pool", "nan-rows", "mixed"):
        tailed = with_tails(x, kind)
        check_inputs(tailed)
        assert tailed.tail_lengths() == {"kv_indices": 29, "out_cache_loc": 5, "custom_mask": 203}
        tailed.fresh_output()
        out = backend.run(tailed)
        assert torch.equal(bits(out), bits(exact)), f"{name}: a tail of {kind} changed the output"


def test_the_kernel_never_reads_a_tail_entry():
    """memcheck over every buffer the kernel is given: slots past the pool and far past it in the tail."""
    x = with_tails(small_call(), "mixed", extra=200)
    traced = CudaEmuBackend().run_traced(x, counters=False, sanitize=True)
    assert traced.sanitizer is not None and traced.sanitizer.clean, traced.sanitizer.summary()
    # the same check sees a read of the tail: count one tail slot as a prefix key
    y = dataclasses.replace(x, kv_indptr=x.kv_indptr + torch.tensor([0, 0, 1], dtype=torch.int32))
    y = dataclasses.replace(y, kv_indices=y.kv_indices.clone())
    used = int(y.kv_indptr[-1])
    y.kv_indices[used - 1] = 1 << 30  # the entry the longer prefix now reads: far past the pool
    y = dataclasses.replace(y, custom_mask=_mask_for(y))
    report = CudaEmuBackend().run_traced(y, counters=False, sanitize=True).sanitizer
    assert report is not None and any(f.check == "memcheck" and f.kernel == "verify" for f in report.findings)


def _mask_for(x: VerifyInputs) -> torch.Tensor:
    """All-visible prefix columns and each tree's mask, for x's lengths (mask_indptr recomputed in place)."""
    rows, ends = [], [0]
    for r, tree in enumerate(x.trees):
        prefix = int(x.kv_indptr[r + 1] - x.kv_indptr[r])
        block = torch.ones(tree.q_len, prefix + tree.q_len, dtype=torch.bool)
        block[:, prefix:] = tree.ancestor_mask()
        rows.append(block.flatten())
        ends.append(ends[-1] + block.numel())
    x.mask_indptr.copy_(torch.tensor(ends, dtype=x.mask_indptr.dtype))
    return torch.cat(rows)


def test_the_checks_refuse_lengths_past_the_buffers_and_name_the_tensor():
    x = small_call()
    short = dataclasses.replace(x, kv_indices=x.kv_indices[:-1])
    with pytest.raises(InputError, match="past the") as err:
        check_inputs(short)
    assert err.value.path == "kv_indptr"
    with pytest.raises(InputError) as err:
        check_inputs(dataclasses.replace(x, out_cache_loc=x.out_cache_loc[:-1]))
    assert err.value.path == "out_cache_loc"
    with pytest.raises(InputError) as err:
        check_inputs(dataclasses.replace(x, custom_mask=x.custom_mask[:-1]))
    assert err.value.path == "custom_mask"


def test_a_capture_with_tails_replays_and_capture_info_shows_the_part_used(tmp_path):
    from safetensors.torch import load_file

    from ddbench.capture.format import write_capture

    original = read_capture(SHIPPED_CAPTURE)
    tensors = load_file(str(SHIPPED_CAPTURE))
    tensors["kv_indices"] = torch.cat([tensors["kv_indices"], torch.full((40,), 10**9, dtype=torch.int64)])
    tensors["custom_mask"] = torch.cat(
        [tensors["custom_mask"], torch.ones(17, dtype=tensors["custom_mask"].dtype)]
    )
    keep = ("sm_scale", "page_size", "is_causal", "max_len_extend", "model")
    path = tmp_path / "tailed.safetensors"
    write_capture(path, tensors, {k: original.metadata[k] for k in keep if k in original.metadata})
    tailed = read_capture(path)
    assert tailed.inputs.tail_lengths() == {"kv_indices": 40, "out_cache_loc": 0, "custom_mask": 17}
    assert (
        tailed.inputs.prefix_lens == original.inputs.prefix_lens
        and tailed.inputs.trees == original.inputs.trees
    )
    reference = get_backend("reference")
    outs = []
    for x in (original.inputs, tailed.inputs):
        x.fresh_output()
        outs.append(reference.run(x).clone())
    assert torch.equal(bits(outs[0]), bits(outs[1]))
    replayed = dataclasses.replace(tailed.inputs, captured_output=tailed.output)
    replayed.fresh_output()
    assert torch.equal(bits(get_backend("captured").run(replayed)), bits(original.output))
    result = CliRunner().invoke(cli, ["capture-info", str(path)], env={"NO_COLOR": "1", "COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    used = int(original.inputs.kv_indptr[-1])
    assert f"kv_indices ({used + 40},): {used} used, a tail of 40 never read" in result.output
    as_json = CliRunner().invoke(cli, ["capture-info", str(path), "--json"])
    summary = json.loads(as_json.output)
    summary = summary[0] if isinstance(summary, list) else summary
    assert summary["used"]["kv_indices"] == used and summary["tails"]["custom_mask"] == 17


def test_over_allocated_buffers_are_sized_for_the_capacity_with_garbage_tails():
    x = small_call()
    y = over_allocated(x, 64, torch.Generator().manual_seed(1))
    check_inputs(y)
    assert y.kv_indices.numel() == 2 * 64 and y.custom_mask.numel() == 2 * 9 * (64 + 9)
    tail = y.kv_indices[int(x.kv_indptr[-1]) :]
    pool = x.k_buffer.shape[0]
    assert bool(((tail == 0) | (tail >= pool) | (tail < 0)).all())  # NaN row, past the pool, negative
    assert {int(v) == 0 for v in tail} == {True, False}


def test_a_replayed_launch_is_planned_once_and_serves_every_length():
    """cuda-emu: one launch prepared on buffers for 2 x 600 keys serves calls of prefix 0 to the capacity,
    ragged, each within the kernel's bounds of fp64 truth; nothing is re-planned, and the buffers' tails hold
    what earlier calls left there."""
    suite = parse_suite(
        {
            "name": "g",
            "cases": [
                {
                    "model": "kimi-k2.6",
                    "layout": {"tp": 8},
                    "batch_size": 2,
                    "prefix": [300, 17],
                    "seed": 5,
                    "tree": {"kind": "ddtree", "budget": 8},
                    "parity": ["cuda-emu"],
                    "sglang_buffers": {
                        "mode": "cuda-graph",
                        "max_context": 600,
                        "replay_prefix": [0, 600, [1, 599], [129, 1]],
                    },
                }
            ],
        },
        "test",
    )
    group = suite.cases
    assert [c.prefix_lens for c in group] == [(300, 17), (0, 0), (600, 600), (1, 599), (129, 1)]
    assert [c.sglang_buffers.replay for c in group] == [0, 1, 2, 3, 4]
    emu, fp64 = CudaEmuBackend(), get_backend("reference-fp64")
    holder = GraphGroup()
    planned = []
    real = emu.marshaled_launch

    def counted(inputs, for_capacity=False):
        launch = real(inputs, for_capacity)
        planned.append((for_capacity, launch.plan))
        return launch

    emu.marshaled_launch = counted
    buffers = None
    for c in group:
        call = holder.bind(c, generate_inputs(c))
        buffers = buffers or call
        assert call.kv_indices is buffers.kv_indices  # the same buffers every time
        call.fresh_output()
        out = holder.launch(emu)().clone()
        truth = fp64.run(call.exact()).clone()
        bound = next(b for b in c.parity if b.candidate == "cuda-emu" and b.against == "reference-fp64")
        assert judge(bound, parity_figures(out, truth), "cuda-emu").status == PASS, c.id
    assert len(planned) == 1 and planned[0][0], "planned once, for the capacity"
    capacity_plan = planned[0][1]
    assert (
        capacity_plan == CudaEmuBackend().marshaled_launch(generate_inputs(group[2]), for_capacity=True).plan
    )


def test_the_replayed_launchs_preparation_and_marshaling_do_not_synchronise(monkeypatch):
    """The replay path reads no length on the host: the capacity plan and marshal_into under a guard that
    fails any host read (a plain call's plan does read kv_indptr[-1], which the guard catches)."""
    from ddbench.kernel.launch import prepare_launch
    from ddbench.kernel.marshal import marshal_into

    x = over_allocated(small_call(), 128, torch.Generator().manual_seed(2))
    k = marshal(x)
    y = over_allocated(small_call(prefix=(100, 3), seed=9), 128, torch.Generator().manual_seed(4))

    def no_read(*args, **kwargs):
        raise AssertionError("host read")

    for name in ("item", "tolist", "__int__", "__index__", "__bool__", "nonzero"):
        monkeypatch.setattr(torch.Tensor, name, no_read)
    planned = prepare_launch(x, for_capacity=True).plan
    marshal_into(y, k)
    with pytest.raises(AssertionError, match="host read"):
        prepare_launch(x)
    monkeypatch.undo()
    assert planned == prepare_launch(x, for_capacity=True).plan
    fresh = marshal(y)
    for name in ("kv_offsets", "mask_words"):
        assert torch.equal(getattr(k, name), getattr(fresh, name)), name


def test_replayable_falls_back_to_run_on_the_buffers():
    x = small_call()
    calls = []

    class Plain:
        name = "plain"

        def availability(self):
            return None

        def run(self, inputs):
            calls.append(inputs)
            return inputs.o_extend

    launch = replayable(Plain(), x)
    launch()
    launch()
    assert calls == [x, x]


@pytest.mark.parametrize(
    ("buffers", "reason"),
    [
        ({"mode": "eager", "max_context": 64, "replay_prefix": [3]}, "replay_prefix needs mode cuda-graph"),
        ({"mode": "eager", "max_context": 20}, "prefix 21 is above max_context 20"),
        ({"mode": "cuda-graph", "max_context": 64, "replay_prefix": [65]}, "replay_prefix[0] 65 is above"),
        (
            {"mode": "cuda-graph", "max_context": 64, "replay_prefix": [[1, 2]]},
            "has 2 entries but batch_size is 1",
        ),
    ],
)
def test_bad_sglang_buffers_name_the_field(buffers, reason):
    entry = {"model": "kimi-k2.6", "layout": {"tp": 8}, "prefix": 21, "tree": {"kind": "ddtree", "budget": 8}}
    with pytest.raises(SuiteInvalid) as err:
        parse_suite({"name": "t", "cases": [entry | {"sglang_buffers": buffers}]}, "bad.json")
    messages = [f"{e.path}: {e.reason}" for e in err.value.errors]
    assert any("sglang_buffers" in m and reason in m for m in messages), messages


def test_a_mutant_replays_its_mistake_on_a_graph_group():
    """The self-test's emulated mutants run again at each replay (re-marshaling would undo the mistake): on
    the smoke suite's CUDA-graph group every replay still carries it, and the kernel's bound catches it."""
    import ddbench.runner.session  # noqa: F401  (registers the mutant family)
    from ddbench.inputs.suite_file import load_suite_file
    from ddbench.metrics import FAIL

    group = [c for c in load_suite_file(ROOT / "suites" / "smoke.json").cases if "-graph512-" in c.id]
    assert len(group) == 4
    mutant, fp64 = get_mutant("mutant-emu:causal-mask"), get_backend("reference-fp64")
    holder = GraphGroup()
    for case in group:
        call = holder.bind(case, generate_inputs(case))
        call.fresh_output()
        out = holder.launch(mutant)().clone()
        truth = fp64.run(call.exact()).clone()
        bound = next(b for b in case.parity if b.candidate == "cuda-emu" and b.against == "reference-fp64")
        assert judge(bound, parity_figures(out, truth), mutant.name).status == FAIL, case.id
