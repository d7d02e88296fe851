"""Latency on the CPU: statistics, the noise-aware regression rule and its false-positive rate, budgets,
baselines (update refusals, atomicity, round trips).

Nothing here reads the real clock: the host clock is a fake that only the fake backends advance, so every
figure is exact and no assertion depends on how loaded the machine is (the sampler on real time is
exercised by the smoke runs, outside any timing assertion).
"""

from __future__ import annotations

import itertools
import json
import random
from importlib.metadata import EntryPoint

import pytest
import torch
from click.testing import CliRunner

from ddbench import atomic
from ddbench.backends import Availability, registry
from ddbench.backends.reference import ReferenceBackend
from ddbench.baselines.entry import BaselineEntry
from ddbench.baselines.store import BaselineFile, load_baseline, save_baseline
from ddbench.cli.main import cli
from ddbench.metrics.latency_verdict import FAIL, NO_BASELINE, PASS, regression
from ddbench.runner import run_case
from ddbench.suite import parse_suite
from ddbench.suite.budget import Budget, RatioLimit
from ddbench.timing import clocks
from ddbench.timing.settings import TimingSettings
from ddbench.timing.stats import LatencyStats, paired_ratio, summarize

QUICK = TimingSettings(
    warmup=1, min_samples=8, max_samples=60, max_seconds=0.4, target_rel_noise=0.02, input_sets=2
)


class FakeClock:
    """Host time that passes only when a fake backend spends it, plus 1 us per reading."""

    def __init__(self) -> None:
        self.ns = 0

    def now_ns(self) -> int:
        self.ns += 1000
        return self.ns

    def spend(self, seconds: float) -> None:
        self.ns += round(seconds * 1e9)


@pytest.fixture(autouse=True)
def fake_clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(clocks, "HOST", fake)
    return fake


def _spend(seconds: float) -> None:
    clocks.HOST.spend(seconds)  # type: ignore[attr-defined]


class _Sleeper:
    """A correct kernel taking a fixed time on the fake clock."""

    name = "sleeper"
    seconds = 0.002

    def availability(self) -> Availability:
        return Availability.yes("test")

    def run(self, inputs):
        inputs.o_extend.copy_(ReferenceBackend().run(inputs))
        _spend(self.seconds)
        return inputs.o_extend


class Steady(_Sleeper):
    name = "steady"


class Slowed(_Sleeper):
    name = "steady"  # the same backend after a bad change: ten times as slow
    seconds = 0.02


class Jittery(_Sleeper):
    name = "jittery"

    def __init__(self) -> None:
        self.durations = itertools.cycle((0.001, 0.012))  # IQR / median far above any limit

    def run(self, inputs):
        inputs.o_extend.copy_(ReferenceBackend().run(inputs))
        _spend(next(self.durations))
        return inputs.o_extend


class TimedReference(ReferenceBackend):
    """The reference, taking 300 us on the fake clock when it is timed."""

    def run(self, inputs):
        _spend(0.0003)
        return super().run(inputs)


class Wrong(_Sleeper):
    name = "wrong"

    def run(self, inputs):
        inputs.o_extend.copy_(ReferenceBackend().run(inputs) * 1.1)
        return inputs.o_extend


def _case(candidate: str = "steady"):
    suite = parse_suite(
        {
            "name": "lat",
            "defaults": {
                "model": "kimi-k2.6",
                "layout": {"tp": 8},
                "prefix": 5,
                "parity": [{"candidate": candidate, "against": "reference", "max_row_ulp": 1.0}],
            },
            "cases": [{"tree": {"kind": "chain", "length": 2}}],
        },
        "t",
    )
    return suite.cases[0]


def _time(backend, baselines=None, budget=None):
    backends = {"reference": TimedReference(), backend.name: backend}
    budget = budget or Budget(timed=(backend.name,), timing=QUICK)
    return run_case(_case(backend.name), backends, torch.device("cpu"), budget, baselines or {})


# --- statistics and the rule --------------------------------------------------------------------------------


def test_summary_statistics():
    s = summarize([10.0, 12.0, 11.0, 13.0, 100.0])
    assert s.median_us == 12.0 and s.samples == 5 and s.min_us == 10.0 and s.max_us == 100.0
    assert s.q1_us == 11.0 and s.q3_us == 13.0 and s.rel_noise == pytest.approx(2 / 12)
    with pytest.raises(ValueError):
        summarize([])


def test_paired_ratio_cancels_a_common_drift():
    drift = [1.0 + 0.5 * i for i in range(20)]  # the machine slows down during the run
    ratio = paired_ratio("a", "b", [2 * d for d in drift], drift)
    assert ratio.median == pytest.approx(2.0) and ratio.rel_noise == pytest.approx(0.0)
    assert summarize(drift).rel_noise > 0.3  # …which the unpaired figures cannot hide


@pytest.mark.parametrize(
    ("before", "after", "tolerance", "flagged"),
    [
        ([100.0] * 10, [103.0] * 10, 0.05, False),  # within the tolerance
        ([100.0] * 10, [110.0] * 10, 0.05, True),  # beyond tolerance, no noise
        ([80.0, 100.0, 120.0, 90, 110] * 2, [112.0, 115, 110, 130, 90] * 2, 0.05, False),  # within the noise
        ([100.0] * 10, [200.0] * 10, 0.05, True),
        ([100.0] * 10, [90.0] * 10, 0.05, False),  # faster is not a regression
    ],
)
def test_noise_aware_regression_rule(before, after, tolerance, flagged):
    assert regression(summarize(after), summarize(before), tolerance)[0] is flagged


# --- budgets on real (host) timings -------------------------------------------------------------------------


def test_no_baseline_is_its_own_verdict_and_fails_only_when_asked():
    result = _time(Steady())
    assert result.timing.verdict.status == NO_BASELINE and result.status == "pass"
    strict = Budget(timed=("steady",), timing=QUICK, missing_baseline="fail")
    assert _time(Steady(), budget=strict).timing.verdict.status == FAIL


def _baseline_then(candidate, mode: str | None = "host") -> str:
    """Measure the unchanged backend as the baseline (stored as timed in `mode`), then `candidate`."""
    stats = _time(Steady()).timing.measurements["steady"].stats
    return _time(candidate, {"steady": BaselineEntry(stats, mode=mode)}).timing.verdict.status


def test_a_slowed_backend_is_flagged_and_an_unchanged_one_is_not():
    assert _baseline_then(Slowed()) == FAIL
    assert _baseline_then(Steady()) == PASS
    assert _baseline_then(Slowed(), mode=None) == FAIL  # an entry from before modes were stored still judges


def test_a_baseline_timed_in_another_mode_does_not_judge():
    """A warm-graph baseline says nothing of a cold-L2 or host-clocked run: no baseline, not a regression."""
    assert _baseline_then(Slowed(), mode="graph") == NO_BASELINE


def _noisy_samples(rng: random.Random, median_us: float, count: int = 40) -> list[float]:
    """Timings as a shared host gives them: 2 % jitter and one sample in ten delayed by up to 50 %."""
    return [
        median_us * rng.gauss(1.0, 0.02) * (1.0 + (rng.random() * 0.5 if rng.random() < 0.1 else 0.0))
        for _ in range(count)
    ]


def test_false_positive_rate_of_an_unchanged_backend():
    """Pairs of measurements of the same backend (fake noisy samples): the rule must (almost) never cry
    wolf, and the same rule must catch a real 20 % slowdown on the same noise."""
    rng = random.Random(20261201)
    pairs = 200
    unchanged = sum(
        regression(summarize(_noisy_samples(rng, 100.0)), summarize(_noisy_samples(rng, 100.0)), 0.05)[0]
        for _ in range(pairs)
    )
    slowed = sum(
        regression(summarize(_noisy_samples(rng, 120.0)), summarize(_noisy_samples(rng, 100.0)), 0.05)[0]
        for _ in range(pairs)
    )
    assert unchanged <= pairs // 50, f"{unchanged}/{pairs} false regressions"
    assert slowed >= pairs * 9 // 10, f"only {slowed}/{pairs} real regressions caught"


def test_ratio_and_ceiling_limits():
    budget = Budget(
        timed=("steady", "reference"),
        timing=QUICK,
        regression_tolerance=None,
        ratios=(RatioLimit("steady", "reference", 0.5),),
        ceiling_us=(("steady", 100.0),),
    )
    verdict = _time(Steady(), budget=budget).timing.verdict
    kinds = {c.kind: c.status for c in verdict.checks}
    assert kinds == {"ratio": FAIL, "ceiling": FAIL}  # 2 ms against 0.3 ms; over 100 us
    loose = Budget(
        timed=("steady", "reference"),
        timing=QUICK,
        regression_tolerance=None,
        ratios=(RatioLimit("steady", "reference", 1e6),),
        ceiling_us=(("steady", 1e6),),
    )
    assert _time(Steady(), budget=loose).timing.verdict.status == PASS


# --- baselines through the CLI ------------------------------------------------------------------------------


@pytest.fixture
def plugins(monkeypatch):
    objects = {"steady": "Steady", "jittery": "Jittery", "wrong": "Wrong"}

    def fake(group=None):
        return [EntryPoint(n, f"{__name__}:{a}", group) for n, a in objects.items()]

    monkeypatch.setattr(registry, "entry_points", fake)


def _suite(tmp_path, candidate: str, max_rel_noise: float = 5.0):
    document = {
        "name": "lat",
        "defaults": {
            "model": "kimi-k2.6",
            "layout": {"tp": 8},
            "prefix": 5,
            "backends": ["reference", candidate],
            "parity": [{"candidate": candidate, "against": "reference", "max_row_ulp": 1.0}],
            "budget": {"timed": [candidate], "timing": {**QUICK.to_json(), "max_rel_noise": max_rel_noise}},
        },
        "cases": [{"tree": {"kind": "chain", "length": 2}}],
    }
    path = tmp_path / "lat.json"
    path.write_text(json.dumps(document))
    return path


def _update(tmp_path, suite):
    return CliRunner().invoke(cli, ["baseline", "update", str(suite), "--root", str(tmp_path / "baselines")])


def _stored(tmp_path):
    return list((tmp_path / "baselines").rglob("*.json"))


def test_update_writes_a_baseline_and_run_judges_against_it(tmp_path, plugins):
    suite = _suite(tmp_path, "steady")
    result = _update(tmp_path, suite)
    assert result.exit_code == 0, result.output
    (path,) = _stored(tmp_path)
    stored = load_baseline(path)
    (entries,) = stored.entries.values()
    entry = entries["steady"]
    assert entry.latency.median_us > 1500 and entry.parity["steady vs reference"]["max_row_ulp"] <= 1
    assert entry.case_hash and entry.date and "packages" in entry.environment
    run = CliRunner().invoke(
        cli, ["run", str(suite), "--baseline", str(path), "--json", str(tmp_path / "r.json")]
    )
    assert run.exit_code == 0, run.output  # the fake clock: the same latency as the stored one
    case = json.loads((tmp_path / "r.json").read_text())["cases"][0]
    (check,) = [c for c in case["latency"]["verdict"]["checks"] if c["kind"] == "regression"]
    assert check["status"] == PASS
    assert f"baseline {entry.latency.median_us:.2f} us" in check["detail"]  # judged against the stored one


def test_update_refused_on_a_parity_failure(tmp_path, plugins):
    result = _update(tmp_path, _suite(tmp_path, "wrong"))
    assert result.exit_code == 1 and "refused" in result.output and "parity" in result.output
    assert not _stored(tmp_path)


def test_update_refused_on_high_noise(tmp_path, plugins):
    result = _update(tmp_path, _suite(tmp_path, "jittery", max_rel_noise=0.05))
    assert result.exit_code == 1 and "noise" in result.output
    assert not _stored(tmp_path)


def test_interrupted_update_leaves_the_old_baseline_intact(tmp_path, plugins, monkeypatch):
    suite = _suite(tmp_path, "steady")
    assert _update(tmp_path, suite).exit_code == 0
    (path,) = _stored(tmp_path)
    before = path.read_bytes()

    def crash(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "replace", crash)
    result = _update(tmp_path, suite)
    assert result.exit_code != 0
    assert path.read_bytes() == before
    left = sorted(p.name for p in path.parent.iterdir())
    assert left in ([path.name], sorted([path.name, f"{path.name}.lock"]))  # no temporary file left behind


def test_baseline_round_trip_and_stable_bytes(tmp_path):
    baseline = BaselineFile("cpu-x", "s", {"b-case": {"z": _entry(1.0), "a": _entry(2.0)}})
    path = tmp_path / "b.json"
    save_baseline(path, baseline)
    first = path.read_bytes()
    loaded = load_baseline(path)
    assert loaded.entries == baseline.entries and (loaded.device, loaded.suite) == ("cpu-x", "s")
    save_baseline(path, loaded)
    assert path.read_bytes() == first
    text = first.decode()
    assert text.index('"a"') < text.index('"z"')  # sorted keys: a baseline change reviews as a small diff


def test_a_corrupt_baseline_is_a_clear_error(tmp_path, plugins):
    suite = _suite(tmp_path, "steady")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = CliRunner().invoke(cli, ["run", str(suite), "--baseline", str(bad)])
    assert result.exit_code == 2 and "bad.json" in result.output and "Traceback" not in result.output


class FailsWhenTimed(Steady):
    """Correct on its parity call, then fails: a crash while being timed is that case's error."""

    name = "steady"
    calls = 0

    def run(self, inputs):
        FailsWhenTimed.calls += 1
        if FailsWhenTimed.calls > 1:
            raise RuntimeError("boom while timed")
        return super().run(inputs)


def test_a_crash_while_timed_is_the_case_error_not_the_runs_end():
    FailsWhenTimed.calls = 0
    result = _time(FailsWhenTimed())
    assert result.status == "error" and "boom while timed" in result.error and result.timing is None


def test_a_timed_backend_that_did_not_run_fails_the_budget():
    budget = Budget(timed=("steady", "cdua"), timing=QUICK, regression_tolerance=None)
    verdict = _time(Steady(), budget=budget).timing.verdict
    assert verdict.status == FAIL
    assert [c.subject for c in verdict.checks if c.kind == "timed" and c.status == FAIL] == ["cdua"]


def test_update_refuses_a_backend_no_bound_judged(tmp_path, plugins):
    suite = _suite(tmp_path, "steady")
    document = json.loads(suite.read_text())
    document["defaults"]["backends"] = ["reference", "steady", "reference-fp64"]
    document["defaults"]["budget"]["timed"] = ["steady", "reference-fp64"]
    suite.write_text(json.dumps(document))
    result = _update(tmp_path, suite)
    text = " ".join(result.output.split())  # rich wraps long lines
    # Refused before any work, as every command refuses a backend that nothing would judge.
    assert result.exit_code == 2 and "reference-fp64: no parity bound of the selected cases judges" in text
    assert not _stored(tmp_path)


def _entry(median: float) -> BaselineEntry:
    stats = summarize([median * f for f in (0.99, 1.0, 1.0, 1.01)])
    return BaselineEntry(LatencyStats.from_json(stats.to_json()), mode="host", date="2026-11-29")


def test_baseline_show_and_diff_gate_a_regression(tmp_path):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    save_baseline(old, BaselineFile("cpu-x", "s", {"case-1": {"b": _entry(100.0)}}))
    save_baseline(new, BaselineFile("cpu-x", "s", {"case-1": {"b": _entry(150.0)}}))
    shown = CliRunner().invoke(cli, ["baseline", "show", str(old)])
    assert shown.exit_code == 0 and "100.00" in shown.output
    same = CliRunner().invoke(cli, ["baseline", "diff", str(old), str(old)])
    assert same.exit_code == 0 and "0 regressed" in same.output
    slower = CliRunner().invoke(cli, ["baseline", "diff", str(old), str(new)])
    assert slower.exit_code == 1 and "1 regressed" in slower.output and "+50.0%" in slower.output


@pytest.mark.parametrize(
    "document",
    [
        {"format": "ddbench-baseline", "version": 1, "suite": "s", "entries": {}},
        {
            "format": "ddbench-baseline",
            "version": 1,
            "device": "d",
            "suite": "s",
            "entries": {"c": {"b": {}}},
        },
        {
            "format": "ddbench-baseline",
            "version": 1,
            "device": "d",
            "suite": "s",
            "entries": {"c": {"b": {"latency": {"median_us": "fast"}}}},
        },
    ],
)
def test_a_malformed_baseline_is_a_clear_error(tmp_path, document):
    path = tmp_path / "b.json"
    path.write_text(json.dumps(document))
    for args in (["baseline", "show", str(path)], ["baseline", "diff", str(path), str(path)]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2 and "b.json" in result.output and "Traceback" not in result.output


def test_atomic_writes_keep_the_files_mode(tmp_path):
    path = tmp_path / "r.json"
    atomic.write_atomic(path, "1")
    assert path.stat().st_mode & 0o777 != 0o600  # umask's mode, not mkstemp's private 0600
    path.chmod(0o640)
    atomic.write_atomic(path, "2")
    assert path.stat().st_mode & 0o777 == 0o640 and path.read_text() == "2"
