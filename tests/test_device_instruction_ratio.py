"""ncu's SASS instructions over the emulation's counted ones, launch by launch: parsed, paired in order, and
refused where the launches are not the same kernel and plan."""

from __future__ import annotations

import json
import zipfile

import pytest

from ddbench.counters import LaunchCounters
from ddbench.device.instruction_ratio import (
    ModeledLaunch,
    NcuLaunch,
    block_error,
    by_kernel,
    counted_instructions,
    launch_ratios,
    main,
    ncu_launches,
    ncu_source_counts,
    source_pages,
)
from ddbench.errors import InputError
from ddbench.model.derived_counters import cta_shape, derived_kernel, phase

HEADER = ["ID", "Kernel Name", "launch__grid_size", "smsp__inst_executed.sum", "gpu__time_duration.sum"]


def raw_csv(*launches: tuple[str, str, str]) -> str:
    lines = [HEADER, ["", "", "", "inst", "us"]]  # ncu's second row: the units
    lines += [[str(i), name, grid, inst, "1.0"] for i, (name, grid, inst) in enumerate(launches)]
    return "\n".join(",".join(f'"{cell}"' for cell in line) for line in lines) + "\n"


def counters(*kernels: tuple[str, int, list[tuple[int, list[int]]]]) -> LaunchCounters:
    """kernels: (name, ctas, [(shape count, [warp instructions of each phase])])."""
    return LaunchCounters(
        tuple(
            derived_kernel(
                name,
                (ctas, 1, 1),
                256,
                0,
                [cta_shape(count, [phase(instructions=w) for w in phases], 0) for count, phases in shapes],
                0,
                0,
            )
            for name, ctas, shapes in kernels
        )
    )


def test_the_raw_page_gives_each_ddbench_launch_in_order_and_skips_others():
    text = raw_csv(
        ("verify_attention_kernel(VerifyParams)", "132", "98350124.000000"),
        ("some_other_kernel(int)", "1", "5"),
        ("combine_parts_kernel(VerifyParams)", "4,160", "11535680.000000"),
    )
    assert ncu_launches(text, "ncu-raw.csv") == [
        NcuLaunch("verify", 132, 98_350_124),
        NcuLaunch("combine", 4_160, 11_535_680),
    ]


def test_a_page_without_the_instruction_count_names_the_file_and_the_column():
    text = raw_csv(("verify_attention_kernel(VerifyParams)", "132", "1")).replace(
        "smsp__inst_executed.sum", "x"
    )
    with pytest.raises(InputError, match=r"run7/ncu-raw.csv: no column 'smsp__inst_executed.sum'"):
        ncu_launches(text, "run7/ncu-raw.csv")


def test_a_launchs_counted_instructions_are_every_shapes_phases_times_its_ctas():
    doc = counters(("verify", 5, [(3, [10, 20]), (2, [7])]))
    assert counted_instructions(doc.kernels[0]) == 3 * 30 + 2 * 7


def test_launches_pair_in_order_and_each_kernel_is_summarised():
    a = counters(("verify", 120, [(120, [100])]))
    b = counters(("verify", 132, [(132, [200])]), ("combine", 72, [(72, [10])]))
    launches = [
        NcuLaunch("verify", 120, 54_000),
        NcuLaunch("verify", 132, 132 * 200 * 5),
        NcuLaunch("combine", 72, 7_200),
    ]
    ratios = launch_ratios([("a", a), ("b", b)], launches)
    assert [(r.case, r.kernel, r.ratio) for r in ratios] == [
        ("a", "verify", 4.5),
        ("b", "verify", 5.0),
        ("b", "combine", 10.0),
    ]
    weighted = (54_000 + 132_000) / (12_000 + 26_400)
    assert by_kernel(ratios) == {
        "verify": {"min": 4.5, "max": 5.0, "weighted": round(weighted, 3)},
        "combine": {"min": 10.0, "max": 10.0, "weighted": 10.0},
    }


def test_each_launch_sets_the_models_sass_count_beside_ncus():
    a = counters(("verify", 120, [(120, [100])]))
    ratios = launch_ratios(
        [("a", a)], [NcuLaunch("verify", 120, 60_000)], lambda kernel: ModeledLaunch(57_000)
    )
    assert ratios[0].to_json()["modeled_sass_instructions"] == 57_000
    assert ratios[0].to_json()["modeled_error"] == -0.05
    assert launch_ratios([("a", a)], [NcuLaunch("verify", 120, 60_000)])[0].to_json()["modeled_error"] is None


def source_page(*launches: tuple[str, list[int]]) -> str:
    """ncu's source page (sass view), each launch printed twice as ncu does."""
    rows = []
    for name, counts in launches:
        for _ in range(2):
            rows.append(["Kernel Name", f"ddk_verify::{name}(ddk_verify::VerifyParams)", ""])
            rows.append(["Address", "Source", "# Samples", "Instructions Executed"])
            rows += [[f"0x{k:x}", "      NOP", "0", f"{n:,}"] for k, n in enumerate(counts)]
    return "\n".join(",".join(f'"{cell}"' for cell in row) for row in rows) + "\n"


def test_the_source_page_gives_each_launchs_executed_instructions_once():
    text = source_page(("verify_attention_kernel", [8, 8, 8, 2]), ("combine_parts_kernel", [4, 1_000]))
    pages = ncu_source_counts(text, "ncu-source.csv")
    assert pages == [("verify", (8, 8, 8, 2))] * 2 + [("combine", (4, 1_000))] * 2  # ncu prints each twice
    launches = [NcuLaunch("verify", 1, 26), NcuLaunch("combine", 1, 1_004)]
    assert source_pages(pages, launches, "ncu-source.csv") == [(8, 8, 8, 2), (4, 1_000)]
    # two identical launches in a row stay two
    assert source_pages(pages[:2], [NcuLaunch("verify", 1, 26)] * 2, "s") == [(8, 8, 8, 2)] * 2


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (
            lambda t: t.replace("Instructions Executed", "x"),
            r"ncu-source\.csv: row 2: no column 'Instructions",
        ),
        (
            lambda t: t.replace('"1,000"', '"1e999"', 1),
            "an executed count that is not a whole number: '1e999'",
        ),
        (lambda t: t.replace('"1,000"', '"-3"', 1), "not a whole number: '-3'"),
        (lambda t: t.replace('NOP","0","8"', 'NOP"', 1), "row 3: a row cut short"),
    ],
)
def test_a_damaged_source_page_names_the_file_and_row(edit, reason):
    text = source_page(("verify_attention_kernel", [8, 8, 8, 2]), ("combine_parts_kernel", [4, 1_000]))
    with pytest.raises(InputError, match=reason):
        ncu_source_counts(edit(text), "ncu-source.csv")


def test_pages_that_are_not_the_raw_pages_launches_are_refused():
    pages = [("verify", (8, 8, 8, 2)), ("verify", (8, 8, 8, 2))]
    with pytest.raises(
        InputError, match="page 1 is verify with 26 instructions, the raw page's launch 1 verify"
    ):
        source_pages(pages, [NcuLaunch("verify", 1, 27)], "ncu-source.csv")
    with pytest.raises(InputError, match="3 pages for the raw page's 2 launches"):
        source_pages([*pages, pages[0]], [NcuLaunch("verify", 1, 26)] * 2, "ncu-source.csv")


def test_the_block_error_counts_instructions_put_in_the_wrong_blocks():
    # two blocks of 3 and 1 instructions; ncu ran them 8 and 2 times; the model 6 and 4: 3*2 + 1*2 misplaced
    assert block_error([(3, 6.0), (1, 4.0)], [8, 8, 8, 2]) == pytest.approx(8 / 26)
    assert block_error([(3, 8.0), (1, 2.0)], [8, 8, 8, 2]) == 0
    assert block_error([(2, 8.0)], [8, 8, 8, 2]) is None  # another SASS than the run's


def test_each_launch_is_checked_block_by_block_where_the_source_page_has_it():
    a = counters(("verify", 1, [(1, [10])]))
    model = ModeledLaunch(26.0, ((3, 6.0), (1, 4.0)))
    (ratio,) = launch_ratios([("a", a)], [NcuLaunch("verify", 1, 26)], lambda kernel: model, [(8, 8, 8, 2)])
    assert ratio.to_json()["block_error"] == round(8 / 26, 4) and ratio.to_json()["modeled_error"] == 0
    (ratio,) = launch_ratios([("a", a)], [NcuLaunch("verify", 1, 26)], lambda kernel: model)
    assert ratio.block_error is None


@pytest.mark.parametrize(
    ("launches", "reason"),
    [
        ([NcuLaunch("verify", 121, 1)], "another kernel or plan ran"),  # the plan split otherwise
        ([NcuLaunch("combine", 120, 1)], "another kernel or plan ran"),
        ([], "needs more"),
        ([NcuLaunch("verify", 120, 1), NcuLaunch("verify", 120, 1)], "1 launches more"),
    ],
)
def test_launches_that_do_not_pair_with_the_emulations_are_refused(launches, reason):
    with pytest.raises(InputError, match=reason):
        launch_ratios([("a", counters(("verify", 120, [(120, [100])])))], launches)


def test_a_run_of_another_kernel_is_refused_before_any_counting(tmp_path, capsys):
    report = {
        "environment": {"device": {"name": "NVIDIA H200"}},
        "steps": {"ncu": {"cases": ["q9-p4096"], "kernel_hash": "0000000000000000"}},
    }
    (tmp_path / "device-check.json").write_text(json.dumps(report))
    with zipfile.ZipFile(tmp_path / "ncu.zip", "w") as z:
        z.writestr("ncu-raw.csv", raw_csv(("verify_attention_kernel(VerifyParams)", "120", "1")))
    assert main([str(tmp_path / "device-check.json"), str(tmp_path / "ncu.zip")]) == 2
    assert "the run's kernel is 0000000000000000, this tree's" in capsys.readouterr().err


def test_a_run_without_an_ncu_step_or_its_files_is_refused(tmp_path, capsys):
    (tmp_path / "device-check.json").write_text(json.dumps({"steps": {"latency": {}}}))
    assert main([str(tmp_path / "device-check.json"), str(tmp_path / "ncu.zip")]) == 2
    assert "device-check.json: steps.ncu.cases: no ncu step with its cases" in capsys.readouterr().err
    (tmp_path / "device-check.json").write_text(
        json.dumps({"steps": {"ncu": {"cases": ["a"]}}, "environment": 3})
    )
    assert main([str(tmp_path / "device-check.json"), str(tmp_path / "ncu.zip")]) == 2
    assert "environment.device.name: no device name" in capsys.readouterr().err
    (tmp_path / "device-check.json").write_text("[1, 2]")
    assert main([str(tmp_path / "device-check.json"), str(tmp_path / "ncu.zip")]) == 2
    assert "no ncu step" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.json"), str(tmp_path / "ncu.zip")]) == 2
    assert "cannot read the run" in capsys.readouterr().err
    assert main(["one"]) == 2
