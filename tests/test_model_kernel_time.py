"""Counters -> modeled time: each limiter picked on hand-written counters whose answer is arithmetic."""

from __future__ import annotations

import math

import pytest

from ddbench.counters import parse_counters
from ddbench.errors import InputError
from ddbench.gpus import RTX_PRO_6000
from ddbench.model.calibration import Calibration
from ddbench.model.kernel_time import model_launch

GPU = RTX_PRO_6000
CLOCK_KHZ = GPU.clock_ghz * 1e3  # cycles per microsecond


def phase(mma=0, wavefronts=0, global_bytes=0, instructions=0):
    return {
        "mma": mma,
        "shared_wavefronts": wavefronts,
        "global_bytes": global_bytes,
        "shuffles": 0,
        "warp_instructions": instructions,
    }


def kernel(ctas, phases, *, sectors=0, unique=None, in_flight=(), smem=90_112, threads=256, name="verify"):
    return {
        "name": name,
        "grid": [ctas, 1, 1],
        "threads_per_cta": threads,
        "ctas": ctas,
        "dynamic_smem_bytes": smem,
        "totals": {
            "global": {
                "load_bytes": 0,
                "store_bytes": 0,
                "cp_async_bytes": 0,
                "sectors": sectors,
                "unique_sectors": sectors if unique is None else unique,
            },
            "shared": {"instructions": {"ld32": 10}, "wavefronts": {"ld32": 40}, "bank_conflicts": 30},
            "cp_async": {
                "waits": len(in_flight),
                "bytes_in_flight_at_wait": list(in_flight),
                "late_waits": 0,
            },
        },
        "cta_shapes": [{"count": ctas, "example_cta": [0, 0, 0], "phases": phases, "global_bytes": 0}],
    }


def launch(*kernels, registers=None, **kw):
    regs = {"verify": 167} if registers is None else registers
    return model_launch(parse_counters({"kernels": list(kernels)}), GPU, regs, **kw)


def test_a_tensor_bound_wave_takes_mma_count_over_the_rate():
    m = launch(kernel(188, [phase(mma=100_000)]))
    k = m.kernels[0]
    assert k.schedule_us == pytest.approx(100_000 / 0.25 / CLOCK_KHZ)
    assert (k.limiter, k.waves, m.limiter) == ("tensor", 1, "tensor")
    assert m.modeled_us == pytest.approx(k.modeled_us + GPU.launch_overhead_us)


def test_shared_wavefronts_and_issue_bind_by_their_own_rates():
    assert launch(kernel(188, [phase(mma=1_000, wavefronts=50_000)])).kernels[0].limiter == "smem"
    k = launch(kernel(188, [phase(mma=1_000, instructions=400_000)])).kernels[0]
    issued = 400_000 * GPU.verify_instructions_per_counted  # SASS instructions per counted primitive
    assert k.limiter == "issue" and k.schedule_us == pytest.approx(issued / 4 / CLOCK_KHZ)


def test_without_a_sass_map_each_counted_primitive_issues_its_kernels_measured_share():
    """ncu saw ~4.6 SASS instructions per counted primitive in the verify kernel, ~11 in the combine: the
    emulation does not see index arithmetic, softmax or loop control. Triton's model has its own count."""
    from ddbench.model.warp_instructions import with_issue_count

    kernels = parse_counters(
        {"kernels": [kernel(1, [phase(instructions=10)], name=n) for n in ("verify", "combine", "other")]}
    ).kernels
    counted = [with_issue_count(k, GPU, None) for k in kernels]
    assert [k.cta_shapes[0].phases[0].warp_instructions for k, _ in counted] == [
        round(10 * GPU.verify_instructions_per_counted),
        round(10 * GPU.combine_instructions_per_counted),
        10,
    ]
    assert {issue.method for _, issue in counted} == {"ratio"}


def test_189_ctas_on_188_sms_run_two_waves_and_are_limited_by_them():
    one = launch(kernel(188, [phase(mma=100_000)])).kernels[0]
    two = launch(kernel(189, [phase(mma=100_000)])).kernels[0]
    assert two.waves == 2 and two.tail_ctas == 1
    assert two.schedule_us == pytest.approx(2 * one.schedule_us)
    assert two.limiter == "waves"


def test_unique_bytes_bound_the_kernel_by_dram_bandwidth():
    sectors = 10_000_000  # 320 MB
    k = launch(kernel(188, [phase(mma=10)], sectors=sectors)).kernels[0]
    assert k.dram_us == pytest.approx(sectors * 32 / 1.792e6)
    assert (k.limiter, k.modeled_us) == ("dram", k.dram_us)


def test_repeated_traffic_binds_l2_when_the_unique_bytes_are_few():
    k = launch(kernel(188, [phase(mma=10)], sectors=10_000_000, unique=1000)).kernels[0]
    assert k.limiter == "l2" and k.modeled_us == pytest.approx(320e6 / (GPU.l2_gbs * 1e3))


def test_plain_loads_wait_a_round_trip_per_in_flight_window():
    threads = 256
    window = threads * 256  # bytes of plain loads in flight per CTA
    k = launch(kernel(188, [phase(global_bytes=3 * window)], threads=threads)).kernels[0]
    assert k.limiter == "latency"
    assert k.schedule_us == pytest.approx(3 * GPU.dram_latency_us)


def test_a_cp_async_pipeline_hides_its_round_trips_behind_compute():
    compute = phase(mma=2_000)  # 8,000 cycles, about 3 us: longer than a round trip
    phases = [phase(global_bytes=4096), compute] * 4
    piped = launch(kernel(188, phases, in_flight=[4096])).kernels[0]
    assert piped.limiter == "tensor"
    fill = GPU.us_to_cycles(GPU.dram_latency_us)
    assert piped.schedule_us == pytest.approx((4 * 8_000 + fill) / CLOCK_KHZ)
    serial = launch(kernel(188, phases)).kernels[0]
    assert serial.schedule_us == pytest.approx(piped.schedule_us + 3 * GPU.dram_latency_us)


def test_each_cta_shape_keeps_its_own_bytes_in_flight():
    """A full CTA's prologue brings its 48 KB in one round trip even where the launch's small CTAs keep less
    in flight: the kernel's mean would have cut it into two."""

    def shape(count, nbytes):
        waits = [{"bytes_in_flight": nbytes, "bytes_completed": nbytes, "phases_ahead": 0, "late": True}]
        phases = [phase(global_bytes=nbytes), phase(mma=10)]
        return {"count": count, "example_cta": [0, 0, 0], "phases": phases, "global_bytes": nbytes,
                "cp_async_waits": waits}  # fmt: skip

    doc = kernel(3, [], in_flight=[48_000, 48_000, 16_000])
    doc["cta_shapes"] = [shape(2, 48_000), shape(1, 16_000)]
    k = launch(doc).kernels[0]
    trip = GPU.dram_latency_us
    assert k.slowest_cta_us == pytest.approx(2 * trip)  # its round trip and the pipe's fill
    doc["cta_shapes"][0].pop("cp_async_waits")  # no waits of its own: the kernel's mean, 37,333 B
    assert launch(doc).kernels[0].slowest_cta_us == pytest.approx(3 * trip)
    doc["cta_shapes"][0]["cp_async_waits"] = "none"
    with pytest.raises(InputError, match=r"cta_shapes\[0\].cp_async_waits"):
        launch(doc)


def test_the_final_merge_waits_for_its_own_loads_after_the_pipeline():
    """From a CTA's first global atomic on (its arrival at a row tile, then the merge where it arrives last)
    nothing is hidden behind the pipeline: each phase pays its own round trips (plain loads, the window of
    threads x 256 B), and the rest of the CTA is modeled as before."""
    compute = phase(mma=2_000)  # 8,000 cycles
    phases = [phase(global_bytes=4096), compute] * 4
    base = launch(kernel(188, phases, in_flight=[4096])).kernels[0]
    arrival = {**phase(global_bytes=128), "instructions": {"atom_global": 1}}
    window = 256 * 256
    merge = phase(global_bytes=2 * window, instructions=40)  # two rounds of plain loads
    tail = launch(kernel(188, [*phases, arrival, merge], in_flight=[4096])).kernels[0]
    latency = GPU.us_to_cycles(GPU.dram_latency_us)
    assert tail.schedule_us == pytest.approx(base.schedule_us + 3 * latency / CLOCK_KHZ)
    assert (base.limiter, tail.limiter) == ("tensor", "tensor")  # 32,000 cycles of mma still weigh most


def test_the_slowest_ctas_time_is_told_by_stage_and_the_stages_add_up_to_it():
    """Prologue (before the first mma), main loop (first to last mma), epilogue, the pipeline's fill, the
    cluster's merge (its own work, its reads of other CTAs' shared memory, its barrier), the final merge:
    each figure is the arithmetic of its phases, and together they are the CTA's time."""
    prologue = phase(wavefronts=1_000, global_bytes=4096)
    tile = phase(mma=2_000)  # 8,000 cycles
    epilogue = phase(wavefronts=300)
    merge = {**phase(wavefronts=200), "cluster_bytes": 1_600, "instructions": {"sync_cluster": 1}}
    arrival = {**phase(global_bytes=128), "instructions": {"atom_global": 1}}
    phases = [prologue, tile, phase(global_bytes=4096), tile, epilogue, merge, arrival]
    doc = kernel(188, phases, in_flight=[4096])
    k = launch(doc).kernels[0]
    latency = GPU.us_to_cycles(GPU.dram_latency_us)
    reads = 2 * GPU.dsmem_latency_cycles  # 1,600 B: one round of reads and the LSEs' before it
    expected = {
        "prologue": 1_000,
        "main loop": 16_000,  # the copy between the tiles hides behind them
        "epilogue": 300,
        "memory waits": latency,  # the pipe's fill
        "cluster merge": 200 + reads + GPU.cluster_barrier_cycles,
        "final merge": latency,  # the arrival's round trip
    }
    assert k.slowest_cta_stages_us == pytest.approx({s: c / CLOCK_KHZ for s, c in expected.items()})
    assert sum(k.slowest_cta_stages_us.values()) == pytest.approx(k.slowest_cta_us)


def test_a_cluster_barrier_in_two_halves_hides_behind_the_work_between_them():
    """A cluster_arrive ends one phase, its cluster_wait a later one: the barrier's latency runs on behind
    the phases between and only what they leave uncovered is paid."""
    tile = phase(mma=2_000)
    merge = {**phase(wavefronts=200), "cluster_bytes": 1_600}
    whole, arrived = {**merge, "instructions": {"sync_cluster": 1}}, {**merge, "cluster_arrives": 1}
    last = phase(wavefronts=50)
    waited = {**last, "instructions": {"sync_cluster": 1}}
    small = phase(wavefronts=100)  # with `last`, 150 cycles: less than the barrier
    arrival = {**phase(global_bytes=128), "instructions": {"atom_global": 1}}  # a round trip: more

    def slowest(*phases) -> float:
        return launch(kernel(188, [tile, *phases])).kernels[0].slowest_cta_us

    assert slowest(arrived, small, waited) == pytest.approx(slowest(whole, small, last) - 150 / CLOCK_KHZ)
    barrier = GPU.cluster_barrier_cycles / CLOCK_KHZ
    assert slowest(arrived, arrival, waited) == pytest.approx(slowest(whole, arrival, last) - barrier)


def test_a_latency_bound_ctas_uncovered_round_trips_are_its_memory_waits():
    window = 4096
    slow = kernel(188, [phase(global_bytes=8 * window), phase(mma=10)], in_flight=[window])
    k = launch(slow).kernels[0]
    latency = GPU.us_to_cycles(GPU.dram_latency_us)
    assert k.slowest_cta_stages_us["memory waits"] == pytest.approx((9 * latency - 40) / CLOCK_KHZ)
    assert k.slowest_cta_stages_us["main loop"] == pytest.approx(40 / CLOCK_KHZ)
    plain = launch(kernel(188, [phase(global_bytes=256 * 256), phase(mma=10)])).kernels[0]  # no cp.async
    assert plain.slowest_cta_stages_us["prologue"] == pytest.approx(latency / CLOCK_KHZ)  # its own trip
    assert plain.slowest_cta_stages_us["memory waits"] == 0


def test_co_resident_ctas_share_the_sm():
    small = kernel(376, [phase(mma=1_000)], smem=1024, threads=128)
    k = launch(small, registers={"verify": 32}).kernels[0]
    assert k.occupancy.ctas_per_sm > 2 and k.waves == 1
    alone = launch(kernel(188, [phase(mma=1_000)], smem=1024, threads=128), registers={"verify": 32}).kernels[
        0
    ]
    assert k.schedule_us == pytest.approx(2 * alone.schedule_us)


def test_a_tiny_launch_is_limited_by_its_overhead_and_graph_nodes_cost_less():
    stream = launch(kernel(1, [phase(mma=10)]))
    graph = launch(kernel(1, [phase(mma=10)]), launch_mode="graph")
    assert stream.limiter == graph.limiter == "launch"
    assert stream.overhead_us == GPU.launch_overhead_us and graph.overhead_us == GPU.graph_node_us


def test_two_kernels_add_up():
    a, b = kernel(188, [phase(mma=100_000)]), kernel(188, [phase(mma=50_000)], name="combine")
    m = launch(a, b, registers={"verify": 167, "combine": 40})
    assert m.kernels_us == pytest.approx(1.5 * m.kernels[0].modeled_us)
    assert m.overhead_us == 2 * GPU.launch_overhead_us


def test_unknown_registers_are_noted_and_the_calibration_is_named():
    m = launch(kernel(188, [phase(mma=10)]), registers={})
    assert any("registers per thread unknown" in n for n in m.notes)
    assert m.calibration == "uncalibrated: datasheet values"
    doubled = Calibration("fitted on a test", {"dram_gbs": 2 * GPU.dram_gbs})
    fast = launch(kernel(188, [phase(mma=10)], sectors=10_000_000), calibration=doubled)
    slow = launch(kernel(188, [phase(mma=10)], sectors=10_000_000))
    assert fast.calibration == "fitted on a test"
    assert fast.kernels[0].dram_us == pytest.approx(slow.kernels[0].dram_us / 2)


def test_wavefronts_per_instruction_and_conflicts_come_through():
    k = launch(kernel(188, [phase(mma=10)])).kernels[0]
    assert k.wavefronts_per_shared_instruction == 4.0 and k.bank_conflicts == 30


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda k: k.pop("ctas"), "kernels[0].ctas: missing"),
        (lambda k: k.update(ctas=-1), "kernels[0].ctas"),
        (lambda k: k.update(ctas=3), "kernels[0].cta_shapes"),
        (
            lambda k: k["cta_shapes"][0]["phases"][0].update(mma="many"),
            "kernels[0].cta_shapes[0].phases[0].mma",
        ),
        (lambda k: k["totals"]["global"].update(unique_sectors=10**9), "unique_sectors"),
        (lambda k: k["totals"]["cp_async"].update(bytes_in_flight_at_wait=[-4]), "bytes_in_flight_at_wait"),
    ],
)
def test_bad_counters_name_the_source_and_the_field(edit, where):
    doc = kernel(188, [phase(mma=10)])
    edit(doc)
    with pytest.raises(InputError) as err:
        model_launch(parse_counters({"kernels": [doc]}, "c.json"), GPU, None)
    assert err.value.message.startswith("c.json: ") and where in err.value.message


def test_a_document_without_kernels_is_refused():
    with pytest.raises(InputError, match="'kernels' list"):
        parse_counters({"kernel": []})
    with pytest.raises(InputError):
        parse_counters([])


def test_many_ctas_schedule_quickly_and_exactly():
    k = launch(kernel(188 * 50 + 7, [phase(mma=1_000)])).kernels[0]
    assert k.waves == 51 and k.schedule_us == pytest.approx(51 * 4_000 / CLOCK_KHZ)
    assert math.isclose(k.slowest_cta_us, 4_000 / CLOCK_KHZ)
