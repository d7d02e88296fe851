"""The emulation's sanitizer (LaunchOptions::sanitize): planted races, an out-of-range global read and an
uninitialised shared read are each caught and named; clean kernels, the verify kernel included, stay clean.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from emu_traced import COUNT, SANITIZE, aligned, build_probes, site_line

from ddbench.backends.cuda_emu import CudaEmuBackend
from ddbench.errors import InputError
from ddbench.inputs import generate_inputs
from ddbench.kernel.build import REPO_ROOT
from ddbench.kernel.sanitizer import parse_sanitizer_report
from ddbench.suite import load_suite, parse_suite

N_IN = 256
SUITES = REPO_ROOT / "suites"


@pytest.fixture(scope="module")
def probes():
    return build_probes()


def sanitize(probes, variant: int, flags: int = SANITIZE):
    data = aligned(N_IN, np.float32)
    data[:] = np.arange(N_IN)
    out = aligned(128, np.float32)
    counters, report = probes.call(
        "ddk_probe_sanitize", variant, data.ctypes.data, N_IN, out.ctypes.data, 128, flags
    )
    return report, counters


@pytest.mark.parametrize("variant", [0, 3, 8])
def test_ordered_accesses_are_clean(probes, variant):
    report, _ = sanitize(probes, variant)
    assert report.clean, report.summary()
    assert report.checked[0]["shared_accesses"] > 0


def race(report):
    assert not report.clean
    (finding,) = [f for f in report.findings if f.check == "racecheck"]
    return finding


def test_a_race_across_warps_names_both_sites_warps_and_lanes(probes):
    report, _ = sanitize(probes, 1)
    f = race(report)
    assert f.hazard == "write-read" and f.space == "shared"
    assert f.first.site == f"probes.cpp:{site_line('race_write')}" and f.first.warp == 0
    assert f.second.site == f"probes.cpp:{site_line('race_read')}" and f.second.warp == 1
    assert f.first.lane == f.second.lane and f.offset == 4 * f.first.lane
    assert f.count == 2 * 32  # 32 lanes in each of the 2 CTAs
    assert "no sync_block between" in f.message and "probes.cpp" in f.message


def test_a_race_inside_a_warp_is_caught_unless_a_collective_orders_it(probes):
    f = race(sanitize(probes, 2)[0])
    assert f.hazard == "write-read" and f.offset == 20
    assert (f.first.warp, f.first.lane, f.second.warp, f.second.lane) == (0, 0, 0, 1)
    assert f.first.site.endswith(str(site_line("warp_race_write")))
    assert f.second.site.endswith(str(site_line("warp_race_read")))
    assert "no sync_block or warp collective between" in f.message
    assert sanitize(probes, 3)[0].clean


def test_a_write_after_read_race(probes):
    report, _ = sanitize(probes, 6)
    read, write = f"probes.cpp:{site_line('war_read')}", f"probes.cpp:{site_line('war_write')}"
    # Which of warp 0's reads come before warp 1's writes is the scheduler's choice: both orders are hazards.
    assert {(f.hazard, f.first.site, f.second.site) for f in report.findings} <= {
        ("read-write", read, write),
        ("write-read", write, read),
    }
    (f,) = [f for f in report.findings if f.hazard == "read-write"]
    assert (f.first.warp, f.second.warp) == (0, 1) and f.first.lane == f.second.lane
    assert report.findings_total == sum(f.count for f in report.findings) == 2 * 32


def test_a_cp_async_landing_under_a_reader_is_a_race(probes):
    f = race(sanitize(probes, 7)[0])
    assert f.hazard == "write-read"
    assert f.first.site.endswith(str(site_line("cp_race_write"))) and f.first.warp == 0
    assert f.second.site.endswith(str(site_line("cp_race_read"))) and f.second.warp == 1


def test_an_out_of_range_global_read_names_the_buffer_offset_and_site(probes):
    report, _ = sanitize(probes, 4)
    (f,) = report.findings
    assert (f.check, f.hazard, f.space, f.buffer) == ("memcheck", "out-of-range", "global", "in")
    assert f.offset == 4 * N_IN and f.first.thread == 3
    assert f.first.site == f"probes.cpp:{site_line('oob_read')}"
    assert f.count == 2 and report.findings_total == 2  # thread 3 of both CTAs
    assert f"offset {4 * N_IN} of buffer 'in' ({4 * N_IN} bytes)" in f.message


def test_an_uninitialised_shared_read_is_reported(probes):
    report, _ = sanitize(probes, 5)
    (f,) = report.findings
    assert (f.check, f.hazard) == ("initcheck", "uninitialized")
    assert f.first.site.endswith(str(site_line("uninit_read")))
    assert f.offset == 256 and f.count == 2 * 64
    assert "0xCD" in f.message


def test_counters_and_sanitizer_together(probes):
    report, counters = sanitize(probes, 1, SANITIZE | COUNT)
    assert not report.clean and counters.kernels[0].ctas == 2


def test_a_damaged_report_is_an_input_error():
    with pytest.raises(InputError, match=r"\$\.findings_total"):
        parse_sanitizer_report({"findings": [], "checked": [], "findings_total": -1}, "r.json")
    with pytest.raises(InputError, match=r"r\.json: \$\.findings\[0\]\.check"):
        parse_sanitizer_report({"findings": [{"check": "?"}], "checked": [], "findings_total": 1}, "r.json")


# ------------------------------------------------------------------------------ the verify kernel --


@pytest.fixture(scope="module")
def emu():
    return CudaEmuBackend(workers=1)


def few_cases():
    """Small cases of both suites: every tree kind, a ragged batch, a paged pool, split keys."""
    picked = []
    groups = (
        ("smoke", ("trees", "ragged", "paged", "dsv3")),
        ("kernel-parity", ("prefix0", "splits", "offtile")),
    )
    for suite, groups_wanted in groups:
        cases = load_suite(SUITES / f"{suite}.json").cases
        for group in groups_wanted:
            picked += [c for c in cases if c.id.split(".")[0] == group][:1]
    return picked


@pytest.mark.parametrize("row_groups", [None, 3])  # the plan's (32 rows on these), 48 rows
def test_the_verify_kernel_is_clean_on_suite_cases(row_groups):
    emu = CudaEmuBackend(workers=1, row_groups=row_groups)
    cases = few_cases()
    assert len(cases) == 7
    for case in cases:
        x = generate_inputs(case)
        lse = torch.empty(x.q_extend.shape[0], x.q_extend.shape[1])
        plain = emu.run(x, lse).clone()
        x.fresh_output()
        traced = emu.run_traced(x, lse, counters=False, sanitize=True)
        assert traced.sanitizer.clean, f"{case.id}: {traced.sanitizer.summary()}"
        assert torch.equal(plain.view(torch.int16), traced.out.view(torch.int16)), case.id
        assert {c["kernel"] for c in traced.sanitizer.checked} >= {"verify"}
        assert emu.marshaled_launch(x).plan.row_groups == (row_groups or 2), case.id


@pytest.mark.parametrize(("ctas", "prefix", "rows"), [(40, 2000, 1), (40, 100, 1), (40, 2000, 5)])
def test_the_two_half_combine_is_clean(ctas, prefix, rows):
    """One row tile (4 tokens x 8 heads) in 40 parts: the combine runs two halves that meet in shared
    memory (one row a CTA), or 8 warps over 5 rows a CTA, a segment a row tile; with 4 key tiles most CTAs'
    ranges are empty."""
    entry = {"label": "halves", "model": "kimi-k2.6", "layout": {"tp": 8}, "prefix": prefix}
    entry["tree"] = {"kind": "chain", "length": 4}
    case = parse_suite({"name": "t", "cases": [entry]}, "t").cases[0]
    x = generate_inputs(case)
    emu = CudaEmuBackend(workers=1, ctas=ctas, combine_rows=rows)
    plan = emu.marshaled_launch(x).plan
    assert (plan.combine_halves, plan.combine_rows) == (2, rows)
    lse = torch.empty(x.q_extend.shape[0], x.q_extend.shape[1])
    traced = emu.run_traced(x, lse, counters=False, sanitize=True)
    assert traced.sanitizer.clean, traced.sanitizer.summary()
    assert {c["kernel"] for c in traced.sanitizer.checked} >= {"verify", "combine"}


def test_memcheck_names_the_kv_pool_when_a_slot_points_past_it(emu, monkeypatch):
    case = load_suite(SUITES / "smoke.json").cases[0]
    x = generate_inputs(case)
    real_prepare = CudaEmuBackend.marshaled_launch

    def bad_slot(self, inputs):
        launch = real_prepare(self, inputs)
        slots = launch.kernel.kv_slots.clone()
        slots[3] = launch.kernel.kv.shape[0]  # one row past the pool
        kernel = type(launch.kernel)(**{**vars(launch.kernel), "kv_slots": slots})
        return dataclasses.replace(launch, kernel=kernel)

    monkeypatch.setattr(CudaEmuBackend, "marshaled_launch", bad_slot)
    report = emu.run_traced(x, counters=False, sanitize=True).sanitizer
    kv = [f for f in report.findings if f.check == "memcheck" and f.buffer == "kv"]
    assert kv, report.summary()
    pool_bytes = x.k_buffer.shape[0] * 576 * 2
    assert kv[0].offset >= pool_bytes and "verify_attn.cuh" in kv[0].first.site
