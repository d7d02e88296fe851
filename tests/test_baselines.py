"""Stored baselines that cannot mislead: typed entries checked field by field, figures a comparison can divide
by, device and suite checks, schema-checked results files, locked merging updates; and the file plumbing under
them (temp files of dead writers, writable output locations, JUnit XML that always parses)."""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import multiprocessing
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import one_case

from ddbench import atomic
from ddbench.baselines.compare import compare_tables, latency_table_of
from ddbench.baselines.entries import baseline_entries, refusal_reasons
from ddbench.baselines.entry import BaselineEntry, ClockRange
from ddbench.baselines.file_lock import exclusive_lock, lock_path
from ddbench.baselines.lookup import BaselineSet
from ddbench.baselines.store import BaselineFile, load_baseline, save_baseline, update_baseline
from ddbench.cli.main import cli
from ddbench.errors import InputError
from ddbench.metrics import PASS, Verdict
from ddbench.metrics.latency_verdict import LatencyVerdict
from ddbench.report.junit import junit_xml, write_junit, xml_text
from ddbench.results.case_result import CaseResult, PairResult
from ddbench.runner.timing import CaseTiming
from ddbench.suite.budget import Budget
from ddbench.suite.ids import workload_hash
from ddbench.suite.model import ParityBound
from ddbench.timing.sampler import Measurement
from ddbench.timing.settings import TimingSettings
from ddbench.timing.stats import LatencyStats, summarize

QUICK = TimingSettings(
    warmup=1, min_samples=4, max_samples=8, max_seconds=0.3, target_rel_noise=0.5, input_sets=1
)


def stats(median: float) -> LatencyStats:
    """Fake samples around `median`, rounded as a stored file holds them."""
    return LatencyStats.from_json(summarize([median * f for f in (0.99, 1.0, 1.0, 1.01)]).to_json())


def entry(median: float, **fields: Any) -> BaselineEntry:
    return BaselineEntry(stats(median), mode="host", clock="host", date="2026-11-30", **fields)


def write_baseline(path: Path, medians: dict[str, float], device="cpu-x", suite="s") -> Path:
    save_baseline(path, BaselineFile(device, suite, {c: {"b": entry(m)} for c, m in medians.items()}))
    return path


def invoke(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def assert_refused(result, *needles: str) -> None:
    """Exit 2, no traceback, and every needle in the message (rich wraps long lines, so spaces are joined)."""
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in text and all(n in text for n in needles), (
        f"exit {result.exit_code}, wanted 2 with {needles}:\n{result.output}"
    )


# --- 1. typed entries ---------------------------------------------------------------------------------------


def test_an_entry_round_trips_and_keeps_fields_it_does_not_know():
    original = entry(
        12.5, case_hash="abc", sm_clock_mhz=ClockRange(1800, 2100), parity={"a vs b": {"x": 1.0}}
    )
    raw = original.to_json() | {"commit": "1234abcd"}
    loaded = BaselineEntry.from_json(json.loads(json.dumps(raw)))
    assert dataclasses.replace(loaded, extra={}) == original
    assert loaded.extra == {"commit": "1234abcd"} and loaded.to_json()["commit"] == "1234abcd"


def test_a_file_written_before_the_typed_entry_still_loads(tmp_path):
    """Older files held only latency, mode and date; load -> save -> load changes nothing."""
    path = tmp_path / "old.json"
    old_entry = {"latency": summarize([10.0, 11.0, 12.0]).to_json(), "mode": "host", "date": "2026-11-29"}
    path.write_text(
        json.dumps(
            {
                "format": "ddbench-baseline",
                "version": 1,
                "device": "d",
                "suite": "s",
                "entries": {"c": {"b": old_entry}},
            }
        )
    )
    loaded = load_baseline(path)
    assert loaded.latency("c", "b").median_us == 11.0 and loaded.entry("c", "b").case_hash is None
    save_baseline(path, loaded)
    first = path.read_bytes()
    save_baseline(path, load_baseline(path))
    assert path.read_bytes() == first and load_baseline(path).entries == loaded.entries


def test_top_level_fields_it_does_not_know_survive_an_update(tmp_path):
    path = write_baseline(tmp_path / "s.json", {"c": 10.0})
    path.write_text(json.dumps(json.loads(path.read_text()) | {"note": "measured after the driver update"}))
    update_baseline(path, "cpu-x", "s", {"d": {"b": entry(5.0)}})
    assert json.loads(path.read_text())["note"] == "measured after the driver update"


@pytest.mark.parametrize(
    ("field", "value", "where"),
    [
        ("case_hash", 5, "case_hash"),
        ("mode", ["host"], "mode"),
        ("environment", "linux", "environment"),
        ("sm_clock_mhz", {"min": 0, "max": 2000}, "sm_clock_mhz"),
        ("sm_clock_mhz", {"min": 1}, "sm_clock_mhz"),
        ("parity", {"a vs b": {"max_row_ulp": float("nan")}}, "parity.a vs b.max_row_ulp"),
        ("parity", {"a vs b": 3}, "parity.a vs b"),
        ("latency", None, "latency"),
    ],
)
def test_every_entry_field_is_checked_and_named(tmp_path, field, value, where):
    path = tmp_path / "b.json"
    document = BaselineFile("d", "s", {"case-1": {"tri": entry(10.0)}}).to_json()
    document["entries"]["case-1"]["tri"][field] = value
    path.write_text(json.dumps(document))
    with pytest.raises(InputError) as caught:
        load_baseline(path)
    assert caught.value.file == str(path) and caught.value.path == f"entries.case-1.tri.{where}"


def _fake_result(samples_us: list[float]) -> CaseResult:
    """A case whose parity passed and whose backend `b` was 'timed' with these samples (no clock involved)."""
    case = one_case()
    bound = ParityBound("b", "reference", (("max_row_ulp", 1.0),))
    budget = Budget(timed=("b",), timing=QUICK)
    measured = Measurement("b", "host", "host", samples_us, "max-samples", sm_clock_mhz=[1500, 1900])
    timing = CaseTiming(budget, {"b": measured}, [], LatencyVerdict(PASS, ()))
    return CaseResult(case, pairs=[PairResult("b", "reference", bound, Verdict(PASS))], timing=timing)


def test_baseline_entries_are_typed_and_equal_what_the_file_reads_back(tmp_path):
    result = _fake_result([10.00001, 10.00002, 10.2, 10.3])
    assert refusal_reasons(result) == []
    (built,) = baseline_entries(result, {"python": "3"}, "k-hash").values()
    assert isinstance(built, BaselineEntry) and built.case_hash == workload_hash(result.case)
    assert built.kernel_hash is None and built.sm_clock_mhz == ClockRange(1500, 1900)
    path = tmp_path / "b.json"
    save_baseline(path, BaselineFile("d", "s", {result.case.id: {"b": built}}))
    assert load_baseline(path).entry(result.case.id, "b") == built


def test_a_zero_latency_measurement_may_not_become_a_baseline():
    (reason,) = refusal_reasons(_fake_result([0.0, 0.0, 0.0]))
    assert "b: latency figures not storable" in reason and "median_us" in reason


# --- 2. figures a comparison can divide by ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("figure", "value", "named"),
    [
        ("median_us", math.nan, "median_us"),
        ("median_us", 0.0, "median_us"),
        ("median_us", -3.0, "median_us"),
        ("min_us", math.inf, "min_us"),
        ("stdev_us", -1.0, "stdev_us"),
        ("q1_us", 10.5, "out of order"),  # q1 > q3: a negative IQR
        ("samples", 0, "samples"),
        ("samples", 2.5, "samples"),
        ("samples", True, "samples"),
        ("rel_noise", math.nan, "rel_noise"),
    ],
)
def test_impossible_latency_figures_are_refused_at_load(tmp_path, figure, value, named):
    path = tmp_path / "hand-edited.json"
    document = BaselineFile("d", "s", {"case-1": {"tri": entry(10.0)}}).to_json()
    document["entries"]["case-1"]["tri"]["latency"][figure] = value
    path.write_text(json.dumps(document))  # json writes NaN / Infinity, as a hand edit can
    for args in (["baseline", "show", path], ["baseline", "diff", path, path]):
        assert_refused(invoke(*args), "hand-edited.json", "entries.case-1.tri.latency", named)


def test_compare_tables_refuses_a_median_it_cannot_divide_by():
    good = stats(10.0)
    zero = dataclasses.replace(good, median_us=0.0)
    nan = dataclasses.replace(good, median_us=math.nan)
    for bad in (zero, nan):
        with pytest.raises(ValueError, match="cannot be compared"):
            compare_tables({("c", "b"): bad}, {("c", "b"): good}, 0.05)
        with pytest.raises(ValueError, match="cannot be compared"):
            compare_tables({("c", "b"): good}, {("c", "b"): bad}, 0.05)
    (change,) = compare_tables({("c", "b"): good}, {("c", "b"): stats(20.0)}, 0.05)
    assert change.regressed and change.change == pytest.approx(1.0)


def test_diff_refuses_a_nan_tolerance(tmp_path):
    path = write_baseline(tmp_path / "b.json", {"c": 10.0})
    assert_refused(invoke("baseline", "diff", path, path, "--tolerance", "nan"), "--tolerance")


# --- results files: the schema first, then the figures ------------------------------------------------------

SUITE = {
    "name": "lat",
    "defaults": {
        "model": "kimi-k2.6",
        "layout": {"tp": 8},
        "prefix": 3,
        "backends": ["reference", "reference-fp64"],
        "parity": [{"candidate": "reference", "against": "reference-fp64", "max_row_ulp": 3.0}],
        "budget": {"timed": ["reference"], "timing": {**QUICK.to_json(), "max_rel_noise": 5.0}},
    },
    "cases": [{"tree": {"kind": "chain", "length": 2}}],
}


@pytest.fixture(scope="module")
def timed_results(tmp_path_factory) -> Path:
    """A real results file of one timed case (its figures are rewritten by the tests, never asserted on)."""
    tmp = tmp_path_factory.mktemp("results")
    suite = tmp / "lat.json"
    suite.write_text(json.dumps(SUITE))
    out = tmp / "r.json"
    result = invoke("run", suite, "--json", out)
    assert result.exit_code in (0, 1) and out.exists(), result.output
    return out


def results_with(tmp_path: Path, source: Path, medians: dict[str, float] | None = None, **edit) -> Path:
    document = json.loads(source.read_text())
    for name, median in (medians or {}).items():
        backend = document["cases"][0]["latency"]["backends"][name]
        scale = median / backend["median_us"]
        for key in ("median_us", "q1_us", "q3_us", "mean_us", "min_us", "max_us", "stdev_us", "iqr_us"):
            backend[key] *= scale
    if "device_name" in edit:
        document["environment"]["device"]["machine"] = edit["device_name"]
    if "raw" in edit:
        edit["raw"](document)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(document))
    return path


def stored_for(results: Path, root: Path, median: float, **fields) -> Path:
    """The baseline `baseline diff RESULTS` will look up for this results file (its device and suite)."""
    document = json.loads(results.read_text())
    case = document["cases"][0]
    from ddbench.baselines.device import device_key_from_facts

    device = fields.pop("device", device_key_from_facts(document["environment"]["device"]))
    path = root / device_key_from_facts(document["environment"]["device"]) / f"{case['case']['suite']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_baseline(
        path, BaselineFile(device, case["case"]["suite"], {case["id"]: {"reference": entry(median)}})
    )
    return path


def test_diff_of_a_results_file_against_its_stored_baseline(tmp_path, timed_results):
    results = results_with(tmp_path, timed_results, {"reference": 100.0})
    stored_for(results, tmp_path / "root", 100.0)
    same = invoke("baseline", "diff", results, "--root", tmp_path / "root")
    assert same.exit_code == 0 and "0 regressed" in same.output and "1 compared" in same.output, same.output
    stored_for(results, tmp_path / "root", 50.0)
    slower = invoke("baseline", "diff", results, "--root", tmp_path / "root")
    assert slower.exit_code == 1 and "1 regressed" in slower.output and "+100.0%" in slower.output


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda d: d["cases"][0].update(status="passed"), "does not match the results schema"),
        (lambda d: d.pop("environment"), "does not match the results schema"),
        (lambda d: d["cases"][0]["latency"]["backends"]["reference"].update(median_us=math.nan), "median_us"),
        (lambda d: d["cases"][0]["latency"]["backends"]["reference"].update(median_us=0), "median_us"),
        (lambda d: d.update(version=7), "version"),
    ],
)
def test_diff_of_a_malformed_results_file_is_exit_2(tmp_path, timed_results, edit, named):
    results = results_with(tmp_path, timed_results, raw=edit)
    baseline = tmp_path / "b.json"
    baseline.write_text(timed_results.read_text())  # a results file on both sides: both are checked
    for args in ([results, baseline], [baseline, results]):
        assert_refused(invoke("baseline", "diff", *args), "results.json", named)


@pytest.mark.parametrize(
    "content",
    ["[" * 100_000 + "]" * 100_000, '{"format": "ddbench-baseline", "version": ' + "9" * 5000 + "}", "{nope"],
)
def test_unparseable_baselines_are_exit_2(tmp_path, content):
    path = tmp_path / "b.json"
    path.write_text(content)
    assert_refused(invoke("baseline", "show", path), "b.json")


def test_a_baseline_that_is_not_a_regular_file_is_refused(tmp_path):
    assert_refused(invoke("baseline", "diff", "/dev/zero", "/dev/zero"), "/dev/zero", "not a regular file")


# --- 3. device and suite ------------------------------------------------------------------------------------


def test_load_baseline_refuses_another_device_or_suite(tmp_path):
    path = write_baseline(tmp_path / "b.json", {"c": 10.0}, device="nvidia-h200", suite="k26")
    assert load_baseline(path, device="nvidia-h200", suite="k26") is not None
    with pytest.raises(
        InputError, match="is for device nvidia-h200 / suite k26, this run is device cpu-x86-64"
    ):
        load_baseline(path, device="cpu-x86-64", suite="k26")
    with pytest.raises(InputError, match="this run is device nvidia-h200 / suite smoke"):
        load_baseline(path, device="nvidia-h200", suite="smoke")


def test_baseline_set_checks_the_file_and_the_workload_hash(tmp_path):
    case = one_case()
    path = tmp_path / "b.json"
    entries = {
        case.id: {
            "same": entry(10.0, case_hash=workload_hash(case)),
            "changed": entry(20.0, case_hash="0" * 16),
            "unhashed": entry(30.0),
        }
    }
    save_baseline(path, BaselineFile("cpu-x", case.suite, entries))
    assert set(BaselineSet("cpu-x", path).entries(case)) == {"same", "unhashed"}
    with pytest.raises(InputError, match="is for device cpu-x"):
        BaselineSet("nvidia-h200", path).entries(case)
    other = dataclasses.replace(case, suite="other")
    with pytest.raises(InputError, match="suite other"):
        BaselineSet("cpu-x", path).entries(other)


def test_show_of_a_suite_refuses_a_stored_file_of_another_device(tmp_path):
    from ddbench.backends import preferred_device
    from ddbench.baselines.device import device_key

    suite = tmp_path / "lat.json"
    suite.write_text(json.dumps(SUITE))
    here = device_key(preferred_device())
    write_baseline(tmp_path / "root" / here / "lat.json", {"c": 10.0}, device="nvidia-h200", suite="lat")
    assert_refused(
        invoke("baseline", "show", suite, "--root", tmp_path / "root"), "is for device nvidia-h200"
    )
    write_baseline(tmp_path / "root" / here / "lat.json", {"c": 10.0}, device=here, suite="lat")
    shown = invoke("baseline", "show", suite, "--root", tmp_path / "root")
    assert shown.exit_code == 0 and "10.00" in shown.output, shown.output


def test_run_refuses_a_baseline_of_another_device(tmp_path):
    suite = tmp_path / "lat.json"
    suite.write_text(json.dumps(SUITE))
    path = write_baseline(tmp_path / "b.json", {"c": 10.0}, device="nvidia-h200", suite="lat")
    assert_refused(invoke("run", suite, "--baseline", path), "b.json", "is for device nvidia-h200")


def test_diff_refuses_files_of_different_devices_or_suites_unless_allowed(tmp_path):
    a = write_baseline(tmp_path / "a.json", {"c": 10.0}, device="nvidia-h200")
    b = write_baseline(tmp_path / "b.json", {"c": 10.0}, device="cpu-x86-64")
    c = write_baseline(tmp_path / "c.json", {"c": 10.0}, device="nvidia-h200", suite="other")
    assert_refused(
        invoke("baseline", "diff", a, b), "device nvidia-h200", "device cpu-x86-64", "--allow-mismatch"
    )
    assert_refused(invoke("baseline", "diff", a, c), "suite s", "suite other")
    allowed = invoke("baseline", "diff", a, b, "--allow-mismatch")
    assert allowed.exit_code == 0 and "0 regressed" in allowed.output


def test_diff_of_results_refuses_a_stored_baseline_of_another_device(tmp_path, timed_results):
    results = results_with(tmp_path, timed_results, {"reference": 100.0})
    stored_for(results, tmp_path / "root", 100.0, device="nvidia-h200")  # copied into the wrong folder
    assert_refused(invoke("baseline", "diff", results, "--root", tmp_path / "root"), "device nvidia-h200")
    missing = invoke("baseline", "diff", results, "--root", tmp_path / "elsewhere")
    assert_refused(missing, "no baseline stored for device")


# --- 5. temp files of dead writers --------------------------------------------------------------------------


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_write_removes_stale_temp_files_of_dead_writers_only(tmp_path):
    target = tmp_path / "r.json"
    old = time.time() - 2 * atomic.LEGACY_STALE_AFTER_S
    dead, alive = dead_pid(), os.getppid()
    names = {
        f".r.json.{dead}.abc123.tmp": True,  # killed writer, untouched for long: removed
        ".r.json.oldstyle.tmp": True,  # older pid-less name, hours old: removed
        f".r.json.{alive}.abc123.tmp": False,  # a live writer
        f".other.json.{dead}.abc123.tmp": False,  # another target's
        "r.json.tmp": False,  # not a hidden temp name
        f".r.json.{dead}.x.y.tmp": False,  # not our pattern
    }
    for name in names:
        (tmp_path / name).write_text("half")
        os.utime(tmp_path / name, (old, old))
    young = tmp_path / f".r.json.{dead}.young1.tmp"  # a writer that may still be at work elsewhere
    young.write_text("half")
    atomic.write_atomic(target, "new")
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {"r.json", young.name} | {n for n, stale in names.items() if not stale}
    assert target.read_text() == "new"


def test_a_folder_is_listed_once_however_many_files_are_written_into_it(tmp_path, monkeypatch):
    """Capture folders fill up one file at a time: listing the folder at every write would be quadratic."""
    listings = []
    real = atomic.os.scandir
    monkeypatch.setattr(atomic.os, "scandir", lambda folder: listings.append(folder) or real(folder))
    for i in range(20):
        atomic.write_atomic(tmp_path / f"capture-{i}.bin", b"x")
    assert len(listings) == 1 and len(list(tmp_path.iterdir())) == 20


def test_temp_names_carry_the_writers_pid(tmp_path, monkeypatch):
    seen = []
    real = atomic.os.replace
    monkeypatch.setattr(atomic.os, "replace", lambda src, dst: seen.append(Path(src).name) or real(src, dst))
    atomic.write_atomic(tmp_path / "r.json", "x")
    (name,) = seen
    assert atomic.temp_file_writer("r.json", name) == (True, os.getpid())


def test_a_failed_write_removes_its_temp_file_and_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    target.write_text("old")

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full_disk)
    with pytest.raises(OSError):
        atomic.write_atomic(target, "new" * 1000)
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"] and target.read_text() == "old"


# --- 6. concurrent updates ----------------------------------------------------------------------------------


def _updater(path: str, tag: str, rounds: int, start) -> None:
    start.wait()
    for i in range(rounds):
        update_baseline(Path(path), "cpu-x", "s", {f"{tag}-{i}": {"b": entry(10.0 + i)}})


def test_two_concurrent_updates_both_survive(tmp_path):
    path = tmp_path / "cpu-x" / "s.json"
    rounds = 15
    context = multiprocessing.get_context("fork")  # the children only read, merge and write JSON
    start = context.Barrier(2)
    workers = [context.Process(target=_updater, args=(str(path), t, rounds, start)) for t in ("a", "b")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert [w.exitcode for w in workers] == [0, 0]
    stored = load_baseline(path)
    assert set(stored.entries) == {f"{t}-{i}" for t in ("a", "b") for i in range(rounds)}
    assert lock_path(path).exists() and not [p for p in path.parent.iterdir() if p.suffix == ".tmp"]


def test_update_baseline_returns_before_and_after_and_checks_the_file(tmp_path):
    path = write_baseline(tmp_path / "s.json", {"kept": 5.0})
    before, after = update_baseline(path, "cpu-x", "s", {"new": {"b": entry(7.0)}})
    assert set(before.entries) == {"kept"} and set(after.entries) == {"kept", "new"}
    assert load_baseline(path).entries == after.entries
    table = latency_table_of(after.to_json(), str(path))
    assert table[("new", "b")].median_us == 7.0
    with pytest.raises(InputError, match="is for device cpu-x"):
        update_baseline(path, "nvidia-h200", "s", {"new": {"b": entry(7.0)}})


def test_a_held_lock_times_out_with_a_clear_error(tmp_path):
    path = tmp_path / "s.json"
    held = pytest.raises(InputError, match="held the lock")  # flock: a second open file waits too
    with exclusive_lock(path), held, exclusive_lock(path, timeout_s=0.1):
        pass
    with exclusive_lock(path, timeout_s=0.1):
        pass  # released


# --- 7. writable output locations ---------------------------------------------------------------------------


def test_check_writable_accepts_a_new_file_in_a_folder_yet_to_be_made(tmp_path):
    atomic.check_writable(tmp_path / "a" / "b" / "r.json", "--json")
    atomic.check_writable_folder(tmp_path / "plots", "--out")
    assert list(tmp_path.iterdir()) == []  # nothing created, no probe left behind


def test_check_writable_refusals(tmp_path):
    a_file = tmp_path / "suite.json"
    a_file.write_text("{}")
    cases = [
        (lambda: atomic.check_writable(a_file / "r.json", "--json"), "is not a folder"),
        (lambda: atomic.check_writable(tmp_path, "--junit"), "is a folder"),
        (lambda: atomic.check_writable("/dev/null", "--markdown"), "not a regular file"),
        (lambda: atomic.check_writable(tmp_path / "." / "suite.json", "--json", [a_file]), "is the input"),
        (lambda: atomic.check_writable_folder(a_file, "--save-outputs"), "not a folder"),
        (lambda: atomic.check_writable_folder(a_file / "sub", "--root"), "is not a folder"),
    ]
    for check, reason in cases:
        with pytest.raises(InputError, match=reason) as caught:
            check()
        assert caught.value.path.startswith("--") and caught.value.exit_code == 2


def test_check_writable_sees_a_full_disk(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "write", full)
    with pytest.raises(InputError, match="no space left"):
        atomic.check_writable(tmp_path / "r.json", "--json")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(
    os.geteuid() == 0, reason="as root a 0o555 folder stays writable (see the parent-file tests)"
)
def test_check_writable_refuses_a_read_only_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(InputError, match="not writable"):
            atomic.check_writable(folder / "r.json", "--json")
    finally:
        folder.chmod(0o755)


def test_commands_check_their_output_locations_first(tmp_path, timed_results):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    results = results_with(tmp_path, timed_results)
    assert_refused(invoke("merge", results, "-o", results), "-o", "is the input")
    assert_refused(invoke("merge", results, "-o", a_file / "m.json"), "-o", "is not a folder")
    assert_refused(invoke("report", results, "--out", a_file / "plots"), "--out")
    assert_refused(invoke("report", results, "--markdown", a_file / "s.md"), "--markdown")
    suite = tmp_path / "lat.json"
    suite.write_text(json.dumps(SUITE))
    assert_refused(invoke("baseline", "update", suite, "--root", a_file / "b"), "--root", "is not a folder")


# --- 8. JUnit -----------------------------------------------------------------------------------------------


def test_junit_of_a_case_id_with_control_characters_parses():
    case = dataclasses.replace(one_case(), id="cap\x01ture\x1b[31m-\ud800x")
    bound = ParityBound("reference", "reference-fp64", (("max_row_ulp", 1.0),))
    pair = PairResult("reference", "reference-fp64", bound, Verdict("fail", ("row 3\x00 off",)))
    xml = junit_xml([CaseResult(case, pairs=[pair]), CaseResult(case, error="bad\x0bfile")])
    root = ET.fromstring(xml.encode())
    names = [c.get("name") for c in root.iter("testcase")]
    assert names == [
        "cap\\x01ture\\x1b[31m-\\ud800x[reference vs reference-fp64]",
        "cap\\x01ture\\x1b[31m-\\ud800x",
    ]
    assert root.find(".//failure").get("message") == "row 3\\x00 off"
    assert root.find(".//error").text == "bad\\x0bfile"
    assert xml_text("tab\tnew\nline é") == "tab\tnew\nline é"  # what XML can hold is left alone


def test_junit_written_after_every_case_is_valid_each_time(tmp_path):
    path = tmp_path / "j.xml"
    atomic.check_writable(path, "--junit")
    results = []
    for label in ("a\x02", "b"):
        results.append(CaseResult(dataclasses.replace(one_case(), id=label), error="no inputs"))
        write_junit(path, results)
        root = ET.parse(path).getroot()
        assert len(list(root.iter("testcase"))) == len(results)
