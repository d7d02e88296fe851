"""Thread-block clusters under the emulation: a cluster's CTAs run together, sync_cluster is a rendezvous of
all their threads, and ld_cluster reads another CTA's shared memory exactly; memcheck, racecheck, initcheck
and the counters see those reads, and a broken cluster protocol is a named error, never a silent result.
"""

from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest
from emu_traced import COUNT, ERR_LEN, SANITIZE, aligned, build_probes, site_line

from ddbench.counters import parse_counters
from ddbench.kernel.sanitizer import parse_sanitizer_report

THREADS = 64
(CLEAN, EARLY_READ, LATE_WRITE, READ_EXITED, SKIPS_BARRIER, UNWRITTEN, BAD_RANK, NO_FINAL_BARRIER, MIXED) = (
    range(9)
)
# the last barrier in two halves (cluster_arrive, work, cluster_wait): as it should be, then broken
(SPLIT, SPLIT_LATE_WRITE, SPLIT_LATE_READ, SPLIT_ARRIVE_AGAIN, SPLIT_WAIT_FIRST, SPLIT_SKIPS, SPLIT_NO_WAIT,
 SPLIT_WHOLE_BETWEEN) = range(9, 17)  # fmt: skip


@pytest.fixture(scope="module")
def probes():
    return build_probes()


def launch(probes, variant: int, cluster: int, blocks: int, flags: int = 0, workers: int = 1):
    """(status, message, input, output, counters, sanitizer report) of one probe launch."""
    n = blocks * THREADS
    data = aligned(n, np.float32)
    data[:] = np.random.default_rng(variant + 10 * cluster).standard_normal(n)
    out = aligned(n, np.float32)
    out[:] = np.nan  # poisoned: every element must be written
    counters, findings = ctypes.c_void_p(), ctypes.c_void_p()
    err = ctypes.create_string_buffer(ERR_LEN)
    rc = probes.lib.ddk_probe_cluster(
        variant, cluster, blocks, THREADS, data.ctypes.data, out.ctypes.data, flags, workers,
        ctypes.byref(counters), ctypes.byref(findings), err, ERR_LEN,
    )  # fmt: skip
    texts = []
    for handle in (counters, findings):
        texts.append(json.loads(ctypes.string_at(handle.value).decode()) if handle.value else None)
        if handle.value:
            probes.lib.ddk_probe_free(handle)
    return (
        rc,
        err.value.decode(),
        data,
        out,
        parse_counters(texts[0]) if texts[0] else None,
        parse_sanitizer_report(texts[1]) if texts[1] else None,
    )


def cluster_sums(data: np.ndarray, cluster: int) -> np.ndarray:
    """What every thread of a cluster computes: word t summed over the cluster's CTAs, in rank order."""
    blocks = data.reshape(-1, cluster, THREADS)
    sums = np.zeros_like(blocks[:, 0, :])
    for rank in range(cluster):
        sums = sums + blocks[:, rank, :]
    return np.repeat(sums[:, None, :], cluster, axis=1).reshape(-1)


@pytest.mark.parametrize(("cluster", "workers"), [(1, 1), (2, 1), (4, 2), (8, 1)])
def test_a_cluster_reads_every_ctas_shared_memory_after_the_barrier(probes, cluster, workers):
    rc, message, data, out, _, report = launch(probes, CLEAN, cluster, 16, SANITIZE, workers)
    assert rc == 0, message
    np.testing.assert_array_equal(out, cluster_sums(data, cluster))  # exact: the same fp32 adds in order
    assert report.clean, report.summary()


def test_the_counters_see_cluster_reads_and_barriers(probes):
    rc, message, _, _, counters, _ = launch(probes, CLEAN, 4, 8, COUNT)
    assert rc == 0, message
    (kernel,) = counters.kernels
    # each thread reads 4 CTAs' words: 3 over the network (its own CTA's is read locally), 4 ld_cluster
    # instructions a warp; 2 cluster barriers per CTA
    assert kernel.totals.cluster_bytes == 8 * THREADS * 4 * 3
    assert (kernel.totals.cluster_barriers, kernel.totals.barriers) == (16, 16)
    for shape in kernel.cta_shapes:
        assert shape.cluster_barriers == 2 and shape.cluster_bytes == THREADS * 4 * 3
        assert sum(p.cluster_bytes for p in shape.phases) == THREADS * 4 * 3
        assert sum(p.instructions["ld_cluster"] for p in shape.phases) == 4 * THREADS // 32
        assert sum(p.instructions["sync_cluster"] for p in shape.phases) == 2 * THREADS // 32


@pytest.mark.parametrize("cluster", [2, 4])
def test_one_ld_cluster_over_several_ranks_is_one_instruction(probes, cluster):
    """Lane t reads rank t % C in one instruction, the CTA's own among them: its lanes are local shared reads
    (no bank conflict: words C apart) and the others network bytes, whichever lane the emulation ran
    first (the kernel's merges read each part's LSE so: an own lane first once counted every lane as a
    local access, the other CTAs' addresses as offsets into its own shared memory: bank conflicts out of
    nothing)."""
    rc, message, data, out, counters, report = launch(probes, MIXED, cluster, 8, COUNT | SANITIZE)
    assert rc == 0, message
    assert report.clean, report.summary()
    blocks = data.reshape(-1, cluster, THREADS)
    t = np.arange(THREADS)
    expected = np.repeat(blocks[:, t % cluster, t][:, None, :], cluster, axis=1).reshape(-1)
    np.testing.assert_array_equal(out, expected)
    (kernel,) = counters.kernels
    remote_lanes = THREADS - THREADS // cluster
    assert kernel.totals.cluster_bytes == 8 * remote_lanes * 4
    assert kernel.totals.shared.bank_conflicts == 0
    # the local lanes (some in every warp): one 4-byte shared read a warp instruction, one wavefront each
    assert kernel.totals.shared.instructions["ld32"] == 8 * THREADS // 32
    assert kernel.totals.shared.wavefronts["ld32"] == 8 * THREADS // 32
    for shape in kernel.cta_shapes:
        assert sum(p.instructions["ld_cluster"] for p in shape.phases) == THREADS // 32
        assert sum(p.instructions["ld_shared"] for p in shape.phases) == 0


def findings_of(report, check: str):
    return [f for f in report.findings if f.check == check]


def test_a_read_before_the_cluster_barrier_is_a_race(probes):
    rc, message, _, _, _, report = launch(probes, EARLY_READ, 2, 4, SANITIZE)
    assert rc == 0, message
    early = f"probes.cpp:{site_line('cluster_early_read')}"
    races = findings_of(report, "racecheck")
    # Rank 0 reads rank 1 before it wrote (read-write); later ranks read after their peer wrote (write-read).
    assert {f.hazard for f in races} == {"read-write", "write-read"}
    assert all(f.space == "cluster shared" and early in (f.first.site, f.second.site) for f in races)
    assert all("with no sync_cluster between" in f.message for f in races)


@pytest.mark.parametrize(
    ("variant", "site"),
    [(LATE_WRITE, "cluster_late_write"), (SPLIT_LATE_WRITE, "split_late_write")],  # after a whole barrier, or
)  # between the two halves of one
def test_a_write_while_other_ctas_may_still_read_is_a_race(probes, variant, site):
    rc, message, _, _, _, report = launch(probes, variant, 2, 4, SANITIZE)
    assert rc == 0, message
    write = f"probes.cpp:{site_line(site)}"
    hazards = {(f.hazard, write in (f.first.site, f.second.site)) for f in findings_of(report, "racecheck")}
    assert ("read-write", True) in hazards


def test_a_remote_read_of_unwritten_bytes_is_an_initcheck_finding(probes):
    rc, message, _, _, _, report = launch(probes, UNWRITTEN, 2, 2, SANITIZE)
    assert rc == 0, message
    (finding,) = findings_of(report, "initcheck")
    assert finding.first.site == f"probes.cpp:{site_line('cluster_uninit')}"
    assert not findings_of(report, "racecheck")  # after the barrier: ordered, only never written


def test_reading_a_cta_that_exited_is_a_memory_error(probes):
    rc, message, *_ = launch(probes, READ_EXITED, 2, 2)
    assert rc == 3 and "CTA rank 1 of the cluster has exited" in message


def test_exiting_while_another_cta_may_still_read_is_a_race_in_any_order(probes):
    """The last rank reads rank 0 after the barrier and nothing orders that read before rank 0 exits: a
    read-exit race on rank 0 (here the read ran first; the other order is a memory error)."""
    rc, message, data, out, _, report = launch(probes, NO_FINAL_BARRIER, 4, 8, SANITIZE)
    assert rc == 0, message
    blocks = data.reshape(2, 4, THREADS)
    np.testing.assert_array_equal(out.reshape(2, 4, THREADS)[:, 3], blocks[:, 0])
    (exit_race,) = [f for f in findings_of(report, "racecheck") if f.hazard == "read-exit"]
    assert exit_race.count == 2  # rank 0 of each cluster
    assert exit_race.first.site == f"probes.cpp:{site_line('cluster_read_then_exit')}"
    assert "then the CTA exited, with no sync_cluster between" in exit_race.message
    assert launch(probes, CLEAN, 4, 8, SANITIZE)[5].clean


def test_a_cta_that_never_reaches_the_cluster_barrier_is_a_deadlock(probes):
    rc, message, *_ = launch(probes, SKIPS_BARRIER, 4, 4)
    assert rc == 2
    barrier = f"probes.cpp:{site_line('cluster_barrier')}"
    assert f"sync_cluster ({barrier}) reached by 192 of 256 threads" in message
    assert "cluster rank 1 (block (1,0,0) of grid (4,1,1)): 64 of 64 threads exited" in message


def test_a_rank_outside_the_cluster_is_a_memory_error(probes):
    rc, message, *_ = launch(probes, BAD_RANK, 2, 2)
    assert rc == 3 and "rank 2 is outside the cluster of 2 CTAs" in message
    assert f"probes.cpp:{site_line('cluster_bad_rank')}" in message


@pytest.mark.parametrize(("cluster", "blocks"), [(4, 6), (16, 16), (3, 4)])
def test_a_cluster_that_does_not_fit_the_grid_is_refused(probes, cluster, blocks):
    rc, message, *_ = launch(probes, CLEAN, cluster, blocks)
    assert rc == 1 and "invalid cluster" in message


@pytest.mark.parametrize(("cluster", "workers"), [(2, 1), (4, 2)])
def test_a_barrier_in_two_halves_orders_what_each_cta_did_before_it_arrived(probes, cluster, workers):
    rc, message, data, out, counters, report = launch(probes, SPLIT, cluster, 8, COUNT | SANITIZE, workers)
    assert rc == 0, message
    np.testing.assert_allclose(out, cluster_sums(data, cluster), rtol=1e-6)
    assert report.clean
    # the phase that ends at the arrival says so; its wait is the cluster barrier that ends a later phase
    (kernel,) = counters.kernels
    arrive, wait = (f"probes.cpp:{site_line(name)}" for name in ("split_arrive", "split_wait"))
    for shape in kernel.cta_shapes:
        phases = shape.phases
        arrived = [i for i, ph in enumerate(phases) if ph.cluster_arrives]
        waited = [i for i, ph in enumerate(phases) if ph.instructions["sync_cluster"]]
        assert len(arrived) == 1 and waited[-1] == arrived[0] + 1
        assert phases[arrived[0]].instructions["sync_block"] == THREADS // 32  # its block barrier
        assert phases[waited[-1]].instructions["st_global"] == THREADS // 32  # the work between
        assert shape.sites[arrive] == {"sync_block": THREADS // 32}
        assert shape.sites[wait] == {"sync_cluster": THREADS // 32}


@pytest.mark.parametrize("cluster", [2, 3])
def test_reading_another_cta_between_the_halves_is_a_race_with_its_exit(probes, cluster):
    """The read comes after the reader's arrival: the barrier does not order it before the owner's exit. In
    a cluster of 3 a third CTA reads the same bytes later, before its own arrival: an ordered read, which
    must not hide the racy one."""
    rc, message, _, _, _, report = launch(probes, SPLIT_LATE_READ, cluster, 2 * cluster, SANITIZE)
    assert rc == 0, message
    read = f"probes.cpp:{site_line('split_late_read')}"
    races = [f for f in findings_of(report, "racecheck") if f.hazard == "read-exit"]
    assert races and all(f.first.site == read for f in races)


@pytest.mark.parametrize(
    ("variant", "rc", "reason"),
    [
        (
            SPLIT_ARRIVE_AGAIN,
            4,
            "cluster_arrive at probes.cpp:{second_arrive} in block (%): arrived again before",
        ),
        (
            SPLIT_WAIT_FIRST,
            4,
            "cluster_wait at probes.cpp:{early_wait} in block (%): waited for a cluster barrier it",
        ),
        (SPLIT_SKIPS, 2, "cluster_wait (probes.cpp:{split_wait}): 1 of the cluster's 2 CTAs arrived"),
        (SPLIT_NO_WAIT, 4, "block (%) exited after a cluster_arrive without its cluster_wait"),
        (
            SPLIT_WHOLE_BETWEEN,
            4,
            "sync_cluster at probes.cpp:{whole_between_halves}: block (%) arrived at a cluster barrier it",
        ),
    ],
)
def test_a_barrier_in_two_halves_used_out_of_order_is_a_named_error(probes, variant, rc, reason):
    got, message, *_ = launch(probes, variant, 2, 2)
    names = ("second_arrive", "early_wait", "split_wait", "whole_between_halves")
    head, _, tail = reason.format(**{n: site_line(n) for n in names}).partition("%")  # % : the block
    assert got == rc and head in message and tail in message.partition(head)[2], message


def test_a_launch_that_failed_between_the_halves_leaves_nothing_behind(probes):
    """The workers are reused: a CTA stopped between its arrival and its wait must not make the next
    launch's first arrival look like a second one."""
    assert launch(probes, SPLIT_ARRIVE_AGAIN, 2, 2)[0] == 4
    assert launch(probes, SPLIT_SKIPS, 2, 2)[0] == 2
    rc, message, data, out, _, report = launch(probes, SPLIT, 2, 4, SANITIZE)
    assert rc == 0, message
    np.testing.assert_allclose(out, cluster_sums(data, 2), rtol=1e-6)
    assert report.clean
