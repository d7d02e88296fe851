"""Capturing SGLang's real extend-attention calls (Triton interpreter on the CPU) and reading them back.

The wrapper is installed on the real `extend_attention_fwd`, real calls are made through SGLang-shaped
frames (ddbench.capture.harness), and the captures must: land on disk within the limits, hold the call and
the kernel's own output, replay bit for bit, keep the pool scattered, and fail loudly — naming the file —
when damaged. The hooks are checked in fresh interpreters.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner

from ddbench.capture import install
from ddbench.capture.config import config_from_env, parse_layers, parse_size
from ddbench.capture.format import encode_capture
from ddbench.capture.harness import TARGET_MODULE, call_like_sglang
from ddbench.capture.hook_file import PTH_LINE, PTH_NAME
from ddbench.capture.installer import is_wrapper
from ddbench.capture.snapshot import CallSnapshot, unsupported
from ddbench.errors import InputError
from ddbench.inputs import check_inputs, generate_inputs
from ddbench.inputs.capture_file import read_capture
from ddbench.inputs.capture_format import METADATA_KEY, OUTPUT_TENSOR, tensor_sha256
from ddbench.inputs.capture_summary import capture_summary
from ddbench.inputs.mask_tree import tree_from_mask
from ddbench.metrics import parity_figures
from ddbench.metrics.ulp import lattice_ulps
from ddbench.suite import Case, parse_suite

pytestmark = pytest.mark.triton

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "suites" / "captures"
SHIPPED_NAMES = [
    "k26-tp8-bs1-p40-ddtree-b8",
    "k26-tp8-bs2-p23-61-eagle",
    "k26-tp8-bs1-p70-ddtree-b16-page16",
]
KIMI_TP8 = {"model": "kimi-k2.6", "layout": {"tp": 8}}
# Realistic and small: Kimi TP8 (8 heads/rank) DDTree; a ragged EAGLE batch; a paged pool.
RECORDED = [
    {**KIMI_TP8, "prefix": 21, "tree": {"kind": "ddtree", "budget": 8}},
    {
        **KIMI_TP8,
        "batch_size": 2,
        "prefix": [9, 30],
        "tree": {"kind": "eagle", "steps": 3, "topk": 2, "num_draft_tokens": 6},
    },
    {**KIMI_TP8, "prefix": 37, "page_size": 16, "tree": {"kind": "chain", "length": 4}},
]
# One head per rank, three prefix tokens, two draft tokens: ~0.1 s a call, for the sampling tests.
TINY = {
    "model": {"heads": 8, "sm_scale": 0.1447},
    "layout": {"tp": 8},
    "prefix": 3,
    "tree": {"kind": "chain", "length": 2},
}


def one_case(entry: dict) -> Case:
    return parse_suite({"name": "capture-test", "cases": [entry]}, "test").cases[0]


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(bits(a), bits(b))


def replays_across_machines(a: torch.Tensor, b: torch.Tensor) -> bool:
    """A capture recorded on another CPU: the interpreter's fp32 sums follow that CPU's vector width, so a few
    elements move by a rounding step (seen: 0.01-0.1 % of them, at most 2 lattice steps on near-zero elements,
    on an AMD EPYC replaying captures made elsewhere); more than one step of the row's scale, or more than 1 %
    of elements moved, is a real difference."""
    moved = float((lattice_ulps(a, b) > 0).float().mean())
    return a.shape == b.shape and parity_figures(a, b).max_row_ulp <= 1.0 and moved < 0.01


@pytest.fixture(scope="module")
def triton():
    if (
        "triton" in sys.modules
        and os.environ.get("TRITON_INTERPRET") != "1"
        and not torch.cuda.is_available()
    ):
        pytest.fail("Triton was imported before TRITON_INTERPRET=1 was set in this pytest process")
    from ddbench.backends import get_backend

    backend = get_backend("triton")
    status = backend.availability()
    if not status.ok:
        pytest.skip(f"SGLang's Triton kernel cannot run here: {status.detail}")
    return backend


@pytest.fixture(scope="module")
def sglang_module(triton):
    import importlib

    return importlib.import_module(TARGET_MODULE)


@pytest.fixture(scope="module")
def recorded(sglang_module, tmp_path_factory):
    """Three real calls through the installed wrapper, one file each."""
    directory = tmp_path_factory.mktemp("recorded")
    original = sglang_module.extend_attention_fwd
    recorder = install(directory, source="test", min_free_bytes=0)
    calls = []
    try:
        assert is_wrapper(sglang_module.extend_attention_fwd)
        for layer, entry in enumerate(RECORDED):
            x = generate_inputs(one_case(entry))
            calls.append((x, call_like_sglang(x, layer_id=layer)))
        assert recorder.flush(60)
        counters = recorder.counters()
    finally:
        recorder.uninstall()
    assert sglang_module.extend_attention_fwd is original
    captures = sorted((read_capture(p) for p in directory.iterdir()), key=lambda c: c.metadata["call_index"])
    return SimpleNamespace(directory=directory, calls=calls, counters=counters, captures=captures)


@pytest.fixture(scope="module")
def tiny(triton):
    """The tiny case's inputs and the unwrapped kernel's output on them (the bits every call must give)."""
    x = generate_inputs(one_case(TINY))
    return x, triton.run(x).clone()


# --- recording --------------------------------------------------------------------------------------------


def test_captures_land_on_disk(recorded):
    files = sorted(recorded.directory.iterdir())
    assert len(files) == 3 and all(f.suffix == ".safetensors" and f.stat().st_size < 1_000_000 for f in files)
    c = recorded.counters
    assert (c["seen"], c["eligible"], c["written"], c["errors"], c["dropped"]) == (3, 3, 3, 0, 0)
    assert c["bytes_written"] == sum(f.stat().st_size for f in files)


def test_capture_holds_the_call_and_the_kernels_output(recorded):
    for layer, ((x, served), cap) in enumerate(zip(recorded.calls, recorded.captures, strict=True)):
        assert same_bits(cap.output, served), "the captured output is not what the kernel wrote"
        y = cap.inputs
        for name in (
            "q_extend",
            "k_extend",
            "v_extend",
            "qo_indptr",
            "kv_indptr",
            "custom_mask",
            "mask_indptr",
        ):
            assert torch.equal(getattr(y, name), getattr(x, name)), name
        assert (y.prefix_lens, y.q_lens, y.page_size) == (x.prefix_lens, x.q_lens, x.page_size)
        assert [t.parents for t in y.trees] == [t.parents for t in x.trees], "trees not recovered"
        assert y.sm_scale == pytest.approx(x.sm_scale, rel=1e-12) and y.max_len_extend == x.max_len_extend
        meta = cap.metadata
        assert (meta["layer"], meta["source"], meta["out_cache_loc"]) == (layer, "test", "captured")
        assert meta["versions"]["sglang"] and meta["triton_interpret"] is True
        check_inputs(y)


def test_replay_reproduces_the_captured_output_exactly(recorded, triton):
    for cap in recorded.captures:
        assert same_bits(triton.run(cap.inputs), cap.output), cap.path.name


def test_pool_keeps_only_the_rows_read_reindexed_and_scattered(recorded):
    for (x, _), cap in zip(recorded.calls, recorded.captures, strict=True):
        y, ps = cap.inputs, x.page_size
        # Same rows behind the new slots, in a new place; pages keep their in-page offsets.
        assert torch.equal(y.k_buffer[y.kv_indices], x.k_buffer[x.kv_indices])
        assert torch.equal(y.k_buffer[y.out_cache_loc], x.k_extend)
        assert torch.equal(y.kv_indices % ps, x.kv_indices % ps)
        assert torch.equal(y.out_cache_loc % ps, x.out_cache_loc % ps)
        used = torch.cat([y.kv_indices, y.out_cache_loc])
        pages = torch.unique(used // ps)
        assert bool((pages % 2 == 1).all()) and bool((pages.diff() >= 2).all()), "used pages are adjacent"
        unused = torch.ones(y.k_buffer.shape[0], dtype=torch.bool)
        unused[used] = False
        assert bool(y.k_buffer[unused].isnan().all()), "rows the call does not read must be NaN"
        assert y.k_buffer.shape[0] == (2 * pages.numel() + 2) * ps


def test_a_large_sparse_pool_shrinks_to_the_rows_read(tiny, tmp_path):
    x, expected = tiny
    far = 50_000  # a serving pool is large and the call's rows are spread far apart
    move = lambda slots: far - 7 * slots  # noqa: E731
    pool = torch.full((far + 1, 1, 576), float("nan"), dtype=torch.bfloat16)
    used = torch.cat([x.kv_indices, x.out_cache_loc])
    pool[move(used)] = x.k_buffer[used]
    sparse = dataclasses.replace(
        x,
        k_buffer=pool,
        v_buffer=pool[..., :512],
        kv_indices=move(x.kv_indices),
        out_cache_loc=move(x.out_cache_loc),
        o_extend=x.o_extend.clone(),
    )
    check_inputs(sparse)
    recorder = install(tmp_path, min_free_bytes=0)
    try:
        out = call_like_sglang(sparse)
        assert recorder.flush(30)
    finally:
        recorder.uninstall()
    assert same_bits(out, expected)
    (path,) = tmp_path.iterdir()
    cap = read_capture(path)
    y = cap.inputs
    assert y.k_buffer.shape[0] == 2 * used.numel() + 2 and path.stat().st_size < 40_000
    assert int(torch.cat([y.kv_indices, y.out_cache_loc]).max()) < y.k_buffer.shape[0]
    assert torch.equal(y.k_buffer[y.kv_indices], x.k_buffer[x.kv_indices])
    assert same_bits(cap.output, expected)


def test_every_nth_layers_and_max_count(sglang_module, tiny, tmp_path):
    x, expected = tiny
    recorder = install(tmp_path, every=2, layers=[1], max_captures=2, min_free_bytes=0, source="test")
    try:
        outputs = [call_like_sglang(x, layer_id=0)] + [call_like_sglang(x, layer_id=1) for _ in range(5)]
        # A call without a custom mask (prefill, draft-extend) is seen but never eligible.
        sglang_module.extend_attention_fwd(
            x.q_extend, x.k_extend, x.v_extend, x.o_extend, x.k_buffer, x.v_buffer, x.qo_indptr,
            x.kv_indptr, x.kv_indices, None, True, None, x.max_len_extend, 1.0, 1.0, x.sm_scale,
        )  # fmt: skip
        assert recorder.flush(30)
        c = recorder.counters()
    finally:
        recorder.uninstall()
    assert all(same_bits(out, expected) for out in outputs)
    assert (c["seen"], c["eligible"], c["skipped_layer"]) == (7, 6, 1)
    # Layer-1 calls 0..4 are candidates; every 2nd is 0, 2, 4; at most 2 files.
    assert (c["skipped_sample"], c["skipped_max"], c["written"], c["errors"]) == (2, 1, 2, 0)
    assert recorder.written == 2
    written = sorted(tmp_path.iterdir())
    assert len(written) == 2 and all("-l1-" in p.name for p in written)
    assert [read_capture(p).metadata["call_index"] for p in written] == [1, 3]


def test_disk_budget_writes_nothing_more_and_never_raises(tiny, tmp_path):
    x, expected = tiny
    recorder = install(tmp_path, max_bytes=60_000, min_free_bytes=0, source="test")
    try:
        outputs = [call_like_sglang(x) for _ in range(3)]  # a tiny capture is ~20 KB, reserved as ~35 KB
        assert recorder.flush(30)
        c = recorder.counters()
    finally:
        recorder.uninstall()
    assert all(same_bits(out, expected) for out in outputs)
    assert c["written"] >= 1 and c["skipped_budget"] >= 1 and c["errors"] == 0
    assert c["bytes_written"] <= 60_000 and sum(p.stat().st_size for p in tmp_path.iterdir()) <= 60_000

    tight = install(tmp_path / "tight", max_bytes=1000, min_free_bytes=0)
    try:
        out = call_like_sglang(x)
        assert tight.flush(30)
    finally:
        tight.uninstall()
    assert same_bits(out, expected) and tight.skipped_budget == 1 and tight.written == 0
    assert not (tmp_path / "tight").exists() or not any((tmp_path / "tight").iterdir())


def test_a_failing_capture_never_reaches_the_caller(tiny, tmp_path, caplog, monkeypatch):
    x, expected = tiny
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("a file where the capture folder should be")
    recorder = install(not_a_dir, min_free_bytes=0)
    try:
        with caplog.at_level("ERROR", logger="ddbench.capture"):
            out = call_like_sglang(x)
            assert recorder.flush(30)
    finally:
        recorder.uninstall()
    assert same_bits(out, expected)
    assert (recorder.errors, recorder.written) == (1, 0)
    assert any("failed; the serving call is unaffected" in r.getMessage() for r in caplog.records)

    def broken(*args, **kwargs):
        raise RuntimeError("capture bug")

    monkeypatch.setattr(CallSnapshot, "plan_call", classmethod(broken))
    recorder = install(tmp_path / "ok", min_free_bytes=0)
    try:
        out = call_like_sglang(x)
    finally:
        recorder.uninstall()
    assert same_bits(out, expected) and recorder.errors == 1 and recorder.written == 0


def test_install_patches_bound_copies_and_uninstall_restores_them(sglang_module, tmp_path):
    original = sglang_module.extend_attention_fwd

    class TritonAttnBackend:  # stands in for SGLang's, which binds torch.compiler.disable(fn) in __init__
        __module__ = "sglang.srt.layers.attention.triton_backend"

        def __init__(self) -> None:
            self.extend_attention_fwd = torch.compiler.disable(original)

    backend = TritonAttnBackend()
    bound_before = backend.extend_attention_fwd
    importer = types.ModuleType("sglang_capture_test_importer")
    importer.extend_attention_fwd = original  # a module that ran `from … import extend_attention_fwd`
    sys.modules[importer.__name__] = importer
    try:
        first = install(tmp_path / "a")
        second = install(tmp_path / "b")  # replaces the first
        assert not first.installed and second.installed
        wrapper = sglang_module.extend_attention_fwd
        assert is_wrapper(wrapper) and wrapper.__wrapped__ is original
        assert importer.extend_attention_fwd is wrapper
        assert backend.extend_attention_fwd is not bound_before
        assert backend.extend_attention_fwd.__wrapped__ is wrapper
        second.uninstall()
    finally:
        del sys.modules[importer.__name__]
    assert sglang_module.extend_attention_fwd is original
    assert importer.extend_attention_fwd is original and backend.extend_attention_fwd is bound_before


def test_unsupported_calls_are_named():
    x = generate_inputs(one_case(TINY))
    call = {
        "q_extend": x.q_extend, "k_extend": x.k_extend, "v_extend": x.v_extend, "o_extend": x.o_extend,
        "k_buffer": x.k_buffer, "v_buffer": x.v_buffer, "k_scale": 1.0, "v_scale": 1.0,
        "logit_cap": 0.0, "sinks": None, "sliding_window_size": -1,
    }  # fmt: skip
    assert unsupported(call) is None
    assert "k_scale" in unsupported({**call, "k_scale": 0.5})
    assert "sinks" in unsupported({**call, "sinks": torch.zeros(1)})
    assert "bf16" in unsupported({**call, "q_extend": x.q_extend.float()})
    assert "view" in unsupported({**call, "v_buffer": x.k_buffer[..., :512].clone()})


# --- reading ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SHIPPED_NAMES)
def test_shipped_captures_read_and_replay(triton, name):
    cap = read_capture(SHIPPED / f"{name}.safetensors")
    assert cap.path.stat().st_size < 1_000_000 and cap.inputs.trees
    assert cap.metadata["model"] == "kimi-k2.6" and cap.inputs.num_heads == 8
    assert replays_across_machines(triton.run(cap.inputs), cap.output)


def _shipped() -> Path:
    return SHIPPED / f"{SHIPPED_NAMES[0]}.safetensors"


def _reencode(tensors: dict, metadata: dict) -> bytes:
    from safetensors.torch import save

    return save(tensors, metadata={METADATA_KEY: json.dumps(metadata)})


def _parts() -> tuple[dict, dict]:
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(_shipped()), "pt") as f:
        metadata = json.loads(f.metadata()[METADATA_KEY])
    return load_file(str(_shipped())), metadata


def _damaged(kind: str) -> bytes | None:
    data = _shipped().read_bytes()
    tensors, meta = _parts()
    header = 8 + int.from_bytes(data[:8], "little")
    if kind == "missing":
        return None
    if kind == "empty":
        return b""
    if kind == "truncated":
        return data[: len(data) // 2]
    if kind == "truncated header":
        return data[: header // 2]
    if kind == "garbage":
        return bytes(range(256)) * 40
    if kind == "header not json":
        return data[:8] + b"{" * (header - 8) + data[header:]
    if kind == "checksum mismatch":
        flipped = bytearray(data)
        flipped[-7] ^= 0x40
        return bytes(flipped)
    if kind == "no metadata":
        from safetensors.torch import save

        return save(tensors)
    if kind == "metadata not json":
        from safetensors.torch import save

        return save(tensors, metadata={METADATA_KEY: "{not json"})
    if kind == "missing tensor":
        del tensors["kv_indices"]
        return _reencode(tensors, meta)
    if kind == "wrong dtype":
        tensors["q_extend"] = tensors["q_extend"].float()
        return _reencode(tensors, {**meta, "tensor_sha256": tensor_sha256(tensors)})
    if kind == "newer format":
        return _reencode(tensors, {**meta, "format_version": 99})
    if kind == "layout broken":  # consistent checksum, but a draft slot points outside the pool
        tensors["out_cache_loc"] = tensors["out_cache_loc"] + 10_000
        return encode_capture(tensors, meta)
    raise AssertionError(kind)


DAMAGE = {
    "missing": "no such capture file",
    "empty": "truncated",
    "truncated": "truncated",
    "truncated header": "truncated",
    "garbage": "not a safetensors file",
    "header not json": "not a safetensors file",
    "checksum mismatch": "checksum mismatch",
    "no metadata": "not a ddbench capture",
    "metadata not json": "not valid JSON",
    "missing tensor": "missing tensor kv_indices",
    "wrong dtype": "expected bfloat16",
    "newer format": "format version 99",
    "layout broken": "out_cache_loc",
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_capture_names_the_file(kind, tmp_path):
    path = tmp_path / f"{kind.replace(' ', '-')}.safetensors"
    data = _damaged(kind)
    if data is not None:
        path.write_bytes(data)
    with pytest.raises(InputError) as caught:
        read_capture(path)
    assert caught.value.file == str(path)
    assert str(path) in caught.value.message and DAMAGE[kind] in caught.value.message


def _hostile(kind: str) -> bytes:
    """The shipped capture (bs 1, 9 draft tokens, 8 heads, a 100-row pool) with one header field or tensor
    set to what a hostile or broken writer could put there; the checksum is kept consistent."""
    tensors, meta = _parts()
    if kind.startswith("max_len_extend"):
        meta["max_len_extend"] = {"max_len_extend 1e9": 10**9, "max_len_extend 1e30": 10**30}[kind]
    elif kind == "page_size 1e30":
        meta["page_size"] = 10**30
    elif kind == "0 heads":
        for name in ("q_extend", OUTPUT_TENSOR):
            tensors[name] = tensors[name][:, :0].contiguous()
    elif kind in ("0 draft tokens", "batch size 0"):
        for name in ("q_extend", "k_extend", "v_extend", OUTPUT_TENSOR, "out_cache_loc", "custom_mask"):
            tensors[name] = tensors[name][:0].contiguous()
        keep = 1 if kind == "batch size 0" else 2
        for name in ("qo_indptr", "mask_indptr", "kv_indptr"):
            tensors[name] = (
                torch.zeros(keep, dtype=tensors[name].dtype)
                if name != "kv_indptr"
                else (tensors[name][:keep].contiguous())
            )
        if kind == "batch size 0":
            tensors["kv_indices"] = tensors["kv_indices"][:0].contiguous()
        meta["max_len_extend"] = 0
    else:
        raise AssertionError(kind)
    return encode_capture(tensors, meta)


HOSTILE = {
    "max_len_extend 1e9": ("metadata.max_len_extend", "above the 9 draft tokens of q_extend"),
    "max_len_extend 1e30": ("metadata.max_len_extend", "above the 9 draft tokens of q_extend"),
    "page_size 1e30": ("metadata.page_size", "above the 100 rows of k_buffer"),
    "0 heads": ("q_extend", "0 heads"),
    "0 draft tokens": ("qo_indptr", "request 0 has 0 draft tokens"),
    "batch size 0": ("qo_indptr", "no request (batch size 0)"),
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_header_fields_that_size_work_are_held_to_the_tensors(kind, tmp_path):
    """A field a backend sizes its work by, or a call with nothing in it, is refused when the file is read
    (validate, list, run), naming the file and the field: before, validate said ok and cuda-emu went to
    16 GB, Triton hung, or a comparison of 0 elements passed."""
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(_hostile(kind))
    field, reason = HOSTILE[kind]
    with pytest.raises(InputError) as caught:
        read_capture(path)
    assert (caught.value.file, caught.value.path) == (str(path), field)
    assert reason in caught.value.reason
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"name": "h", "cases": [{"capture": path.name}]}))
    result = invoke("validate", suite)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{path}: {field}: " in result.output and reason in result.output


def test_a_suite_names_the_tensor_a_capture_breaks(tmp_path):
    """The suite's message carries the capture's own location (file and tensor), as capture-info does."""
    tensors, meta = _parts()
    tensors["out_cache_loc"] = tensors["out_cache_loc"] + 10_000
    path = tmp_path / "broken.safetensors"
    path.write_bytes(encode_capture(tensors, meta))
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"name": "h", "cases": [{"capture": path.name}]}))
    result = invoke("validate", suite)
    assert result.exit_code == 2
    assert f"{path}: out_cache_loc: index out of range" in result.output


def test_the_estimate_counts_max_len_extend_as_backends_do(tmp_path):
    """A backend sizes its work by max_len_extend (Triton's query blocks, the mask words per row), so a
    replayed case's q_len, which the estimate reads, is that field rather than the longest q_len."""
    from ddbench.inputs.suite_file import load_suite_file

    tensors, meta = _parts()
    assert meta["max_len_extend"] == 9
    tensors["q_extend"] = torch.cat([tensors["q_extend"]] * 2)  # a second request of the same 9 tokens
    path = tmp_path / "wide.safetensors"
    meta["max_len_extend"] = 12  # legal: at most the 18 draft tokens there are
    wide = dict(tensors)
    t = 9
    wide["qo_indptr"] = torch.tensor([0, t, 2 * t], dtype=tensors["qo_indptr"].dtype)
    prefix = int(tensors["kv_indptr"][-1])
    wide["kv_indptr"] = torch.tensor([0, prefix, 2 * prefix], dtype=tensors["kv_indptr"].dtype)
    wide["kv_indices"] = torch.cat([tensors["kv_indices"]] * 2)
    wide["out_cache_loc"] = torch.cat([tensors["out_cache_loc"]] * 2)
    wide["k_extend"] = torch.cat([tensors["k_extend"]] * 2)
    wide["v_extend"] = torch.cat([tensors["v_extend"]] * 2)
    wide[OUTPUT_TENSOR] = torch.cat([tensors[OUTPUT_TENSOR]] * 2)
    wide["custom_mask"] = torch.cat([tensors["custom_mask"]] * 2)
    mask = int(tensors["mask_indptr"][-1])
    wide["mask_indptr"] = torch.tensor([0, mask, 2 * mask], dtype=tensors["mask_indptr"].dtype)
    path.write_bytes(encode_capture(wide, meta))
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"name": "h", "cases": [{"capture": path.name}]}))
    (case,) = load_suite_file(suite).cases
    assert case.q_lens == (9, 9) and case.q_len == 12


def test_a_uint8_mask_runs_like_a_bool_one(tmp_path):
    """The format allows a uint8 custom_mask (what some servers pass); every backend runs it."""
    tensors, meta = _parts()
    tensors["custom_mask"] = tensors["custom_mask"].to(torch.uint8)
    path = tmp_path / "u8.safetensors"
    path.write_bytes(encode_capture(tensors, meta))
    suite = tmp_path / "suite.json"
    bounds = [{"candidate": "captured", "against": "reference-fp64", "max_row_ulp": 3.0}]
    bounds.append({"candidate": "cuda-emu", "against": "captured", "max_row_ulp": 3.0})
    document = {"name": "h", "defaults": {"parity": bounds}, "cases": [{"capture": path.name}]}
    suite.write_text(json.dumps(document))
    result = invoke("run", suite, "--backends", "reference-fp64,captured,cuda-emu")
    assert result.exit_code == 0, result.output
    assert "2 pass" in result.output or "passed" in result.output


def test_tree_from_mask_accepts_only_ancestor_masks():
    tree = one_case({**KIMI_TP8, "prefix": 0, "tree": {"kind": "ddtree", "budget": 8}}).tree
    from ddbench.trees import build_tree

    t = build_tree(tree, seed=3)
    assert tree_from_mask(t.ancestor_mask()).parents == t.parents
    closed = t.ancestor_mask()
    closed[-1, 0] = False  # a node that does not see the root
    assert tree_from_mask(closed) is None
    forest = torch.eye(3, dtype=torch.bool)
    assert tree_from_mask(forest) is None
    later = torch.ones(2, 2, dtype=torch.bool)  # sees a later token
    assert tree_from_mask(later) is None


def test_capture_files_are_plain_safetensors():
    from safetensors import safe_open

    with safe_open(str(_shipped()), "pt") as f:
        assert set(f.keys()) >= {"q_extend", "k_buffer", "custom_mask", OUTPUT_TENSOR}
        meta = json.loads(f.metadata()[METADATA_KEY])
    assert meta["format_version"] == 1 and meta["page_size"] == 1 and meta["layer"] == 3


def test_summary():
    s = capture_summary(read_capture(SHIPPED / f"{SHIPPED_NAMES[1]}.safetensors"))
    assert (s["batch_size"], s["heads"], s["prefix_lens"], s["q_lens"]) == (2, 8, [23, 61], [6, 6])
    assert [t["nodes"] for t in s["trees"]] == [6, 6] and all(t["depth"] == 3 for t in s["trees"])
    assert s["shapes"]["q_extend"] == [12, 8, 576] and s["sm_scale"] == pytest.approx(0.14468, abs=1e-5)


def test_summary_measures_the_channels_a_synthetic_style_is_compared_on():
    """Per-channel RMS of the prefix keys' latent and rope parts and of the output (docs/inputs.md)."""
    capture = read_capture(SHIPPED / f"{SHIPPED_NAMES[1]}.safetensors")
    s = capture_summary(capture)
    x = capture.inputs
    latent = x.k_buffer[x.kv_indices.long(), 0, :512].double()
    rms = latent.square().mean(0).sqrt()
    assert s["latent_channels"]["channels"] == 512 and s["rope_channels"]["channels"] == 64
    assert s["latent_channels"]["median_rms"] == pytest.approx(float(rms.median()))
    assert s["latent_channels"]["largest_over_median"][0] == pytest.approx(
        float(rms.max() / rms.median()), abs=0.01
    )
    assert s["output_channels"]["channels"] == 512


# --- the command line -------------------------------------------------------------------------------------


def invoke(*args: str):
    from ddbench.cli.main import cli

    return CliRunner().invoke(cli, [str(a) for a in args])


def test_capture_info_command(tmp_path):
    result = invoke("capture-info", SHIPPED)
    assert result.exit_code == 0, result.output
    assert all(name in result.output for name in SHIPPED_NAMES) and "depth" in result.output
    result = invoke("capture", "info", "--json", _shipped())
    assert result.exit_code == 0
    (summary,) = json.loads(result.output)
    assert summary["trees"][0]["q_len"] == 9 and summary["prefix_lens"] == [40]

    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(_shipped().read_bytes()[:5000])
    result = invoke("capture-info", _shipped(), bad)
    assert result.exit_code == 2
    assert str(bad) in result.output and "truncated" in result.output and "Traceback" not in result.output
    result = invoke("capture-info", tmp_path / "nothing-here")
    assert result.exit_code == 2 and "no such capture file" in result.output


def test_a_writer_may_leave_metadata_out_and_the_pool_uncompacted(tmp_path):
    """capture-info says "not recorded" (never "None") for optional metadata a file lacks, and a pool with
    rows nobody reads (not the recorder's compact one) replays: docs/capture-format.md says both."""
    from safetensors.torch import load_file

    from ddbench.capture.format import write_capture
    from ddbench.inputs.capture_file import read_capture

    shipped = _shipped()
    original = read_capture(shipped)
    tensors = load_file(str(shipped))
    pool = tensors["k_buffer"]
    tensors["k_buffer"] = torch.cat([pool, torch.randn(37, *pool.shape[1:]).to(pool.dtype)])  # unused rows
    kept = {k: original.metadata[k] for k in ("sm_scale", "page_size", "is_causal", "max_len_extend")}
    path = tmp_path / "bare.safetensors"
    write_capture(path, tensors, kept)
    bare = read_capture(path)
    assert bare.inputs.k_buffer.shape[0] == pool.shape[0] + 37
    assert torch.equal(bare.output, original.output)
    result = invoke("capture-info", path)
    assert result.exit_code == 0, result.output
    assert "not recorded" in result.output and "None" not in result.output


# --- the hooks --------------------------------------------------------------------------------------------


def _python(code: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DDBENCH_CAPTURE")}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_autoinstall_patches_a_fresh_interpreter(triton, tmp_path):
    code = f"""
import json
import ddbench.capture.autoinstall as hook
import {TARGET_MODULE} as m
from {TARGET_MODULE} import extend_attention_fwd as bound
from ddbench.capture import active
from ddbench.capture.installer import is_wrapper
r = active()
print(json.dumps({{"armed": hook.armed, "wrapped": is_wrapper(m.extend_attention_fwd),
                  "bound": bound is m.extend_attention_fwd, "dir": str(r.directory), "every": r.every,
                  "layers": sorted(r.layers), "max": r.max_captures, "bytes": r.max_bytes}}))
"""
    env = {
        "TRITON_INTERPRET": "1",
        "DDBENCH_CAPTURE_DIR": str(tmp_path / "caps"),
        "DDBENCH_CAPTURE_EVERY": "3",
        "DDBENCH_CAPTURE_LAYERS": "0,1",
        "DDBENCH_CAPTURE_MAX": "5",
        "DDBENCH_CAPTURE_MAX_BYTES": "20M",
    }
    run = _python(code, env, tmp_path)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got == {
        "armed": True,
        "wrapped": True,
        "bound": True,
        "dir": str(tmp_path / "caps"),
        "every": 3,
        "layers": [0, 1],
        "max": 5,
        "bytes": 20 << 20,
    }


def test_pth_hook_arms_every_interpreter_and_never_breaks_one(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))  # as site.addsitedir leaves it: a folder whose .pth files run
    result = invoke("capture", "install-hook", "--site-dir", site)
    assert result.exit_code == 0, result.output
    pth = site / PTH_NAME
    assert len(pth.read_text().splitlines()) == 1
    probe = (
        f"import site, sys; site.addsitedir({str(site)!r}); "
        "print('ddbench.capture.autoinstall' in sys.modules)"
    )
    armed = _python(probe, {"DDBENCH_CAPTURE_DIR": str(tmp_path / "caps")}, tmp_path)
    assert (armed.returncode, armed.stdout.strip(), armed.stderr) == (0, "True", "")
    off = _python(probe, {}, tmp_path)
    assert (off.returncode, off.stdout.strip()) == (0, "False")
    broken = tmp_path / "broken"
    (broken / "ddbench").mkdir(parents=True)
    (broken / "ddbench" / "__init__.py").write_text("raise RuntimeError('a broken ddbench')\n")
    env = {"DDBENCH_CAPTURE_DIR": str(tmp_path / "caps"), "PYTHONPATH": str(broken)}
    survived = _python(probe + "; print('started')", env, tmp_path)
    assert survived.returncode == 0 and "started" in survived.stdout
    assert "capture not armed" in survived.stderr and "broken ddbench" in survived.stderr

    result = invoke("capture", "uninstall-hook", "--site-dir", site)
    assert result.exit_code == 0 and not pth.exists()
    assert "no hook" in invoke("capture", "uninstall-hook", "--site-dir", site).output


def test_install_hook_refuses_a_folder_whose_pth_files_never_run(tmp_path):
    folder = tmp_path / "not-a-site-dir"
    result = invoke("capture", "install-hook", "--site-dir", folder)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{folder}: --site-dir: is not a site-packages folder of this Python" in result.stderr
    assert "installed" not in result.output and not (folder / PTH_NAME).exists()


def test_uninstall_hook_removes_only_its_own_file(tmp_path):
    theirs = tmp_path / PTH_NAME
    theirs.write_text("import something_else\n")
    result = invoke("capture", "uninstall-hook", "--site-dir", tmp_path)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{theirs}: does not hold the line" in result.stderr and "not ours to delete" in result.stderr
    assert theirs.read_text() == "import something_else\n"
    theirs.write_text(PTH_LINE)
    result = invoke("capture", "uninstall-hook", "--site-dir", tmp_path)
    assert result.exit_code == 0 and f"removed {theirs}" in result.output and not theirs.exists()


def _fake_target(root: Path) -> Path:
    """An empty module at SGLang's target path, so a test sees the import hook fire without SGLang."""
    *packages, module = TARGET_MODULE.split(".")
    folder = root.joinpath(*packages)
    folder.mkdir(parents=True)
    for depth in range(1, len(packages) + 1):
        root.joinpath(*packages[:depth], "__init__.py").write_text("")
    (folder / f"{module}.py").write_text("")
    return root


def test_bad_settings_warn_once_and_only_where_capture_would_act(tmp_path):
    fake = _fake_target(tmp_path / "fake")
    env = {
        "DDBENCH_CAPTURE_DIR": str(tmp_path / "caps"),
        "DDBENCH_CAPTURE_EVERY": "0",
        "PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]),
    }
    elsewhere = _python("import ddbench.capture.autoinstall as hook; print(hook.armed)", env, tmp_path)
    assert (elsewhere.returncode, elsewhere.stdout.strip(), elsewhere.stderr) == (0, "False", "")
    code = f"import ddbench.capture.autoinstall, importlib; import {TARGET_MODULE} as m; importlib.reload(m)"
    where = _python(code, env, tmp_path)
    assert where.returncode == 0, where.stderr
    assert where.stderr.count("ddbench capture: not armed: DDBENCH_CAPTURE_EVERY='0'") == 1, where.stderr


def test_config_from_env():
    assert config_from_env({}) is None and config_from_env({"DDBENCH_CAPTURE_DIR": " "}) is None
    assert config_from_env({"DDBENCH_CAPTURE_DIR": "/x", "DDBENCH_CAPTURE_MODEL": "kimi-k2.6"}) == {
        "directory": "/x",
        "model": "kimi-k2.6",
    }
    assert parse_size("1.5G", "n") == 3 << 29 and parse_size("500 MiB", "n") == 500 << 20
    assert parse_size("4096", "n") == 4096
    assert parse_layers("0-2, 60", "n") == {0, 1, 2, 60}
    for env in (
        {"DDBENCH_CAPTURE_EVERY": "0"},
        {"DDBENCH_CAPTURE_LAYERS": "3-1"},
        {"DDBENCH_CAPTURE_MAX_BYTES": "lots"},
    ):
        with pytest.raises(ValueError, match="DDBENCH_CAPTURE_"):
            config_from_env({"DDBENCH_CAPTURE_DIR": "/x", **env})
