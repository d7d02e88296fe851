"""The timing layer on fakes: the stopping rule, the sampler over callables, the no-work check, the cold-L2
size, CPU thread pinning, the prepare/launch split and the command-line overrides.

Every clock here is a fake (a counter advanced by the fake launches), so each figure is exact.
"""

from __future__ import annotations

import random
from typing import ClassVar

import pytest
import torch
from conftest import one_case

from ddbench.backends import Availability, Capabilities, capabilities, prepared
from ddbench.backends.reference import ReferenceBackend
from ddbench.errors import InputError
from ddbench.inputs import generate_inputs
from ddbench.runner.timing import PREPARE_SAMPLES, measure_backends, timing_subject
from ddbench.timing.graphs import NoKernelWork, check_did_work, graph_node_count, verify_call, warned_empty
from ddbench.timing.l2 import LARGEST_TARGET_L2_BYTES, l2_flush_bytes
from ddbench.timing.remedy import noise_refusal
from ddbench.timing.sampler import TimingSubject, measure
from ddbench.timing.settings import TimingSettings, with_overrides
from ddbench.timing.stats import relative_noise, summarize
from ddbench.timing.stopping import MAX_SAMPLES, NOISE, TIME_LIMIT, StoppingRule
from ddbench.timing.threads import torch_threads

CPU = torch.device("cpu")
SETTINGS = TimingSettings(warmup=2, min_samples=5, max_samples=50, target_rel_noise=0.02, max_seconds=1.0)


class FakeClock:
    """Nanoseconds that pass only when told to."""

    def __init__(self) -> None:
        self.ns = 0

    def now_ns(self) -> int:
        return self.ns

    def spend_us(self, us: float) -> None:
        self.ns += round(us * 1000)


class FakeLaunch:
    """Writes its output and takes `durations_us` in turn on the fake clock; counts its calls."""

    def __init__(self, clock: FakeClock, durations_us, writes: bool = True) -> None:
        self.clock, self.durations, self.writes = clock, list(durations_us), writes
        self.output = torch.full((4, 2, 8), float("nan"))
        self.calls = 0

    def __call__(self) -> torch.Tensor:
        self.clock.spend_us(self.durations[self.calls % len(self.durations)])
        self.calls += 1
        if self.writes:
            self.output.fill_(1.0)
        return self.output

    def poison(self) -> None:
        self.output.fill_(float("nan"))


def _subject(*launches: FakeLaunch, prepare_us: float | None = None) -> TimingSubject:
    return TimingSubject(list(launches), [launch.poison for launch in launches], prepare_us)


# --- the stopping rule ------------------------------------------------------------------------------------


def test_the_rule_stops_on_noise_once_min_samples_are_in():
    clock = FakeClock()
    rule = StoppingRule(SETTINGS, clock)
    for k in range(SETTINGS.min_samples - 1):
        rule.add({"a": 100.0, "b": 50.0})
        assert not rule.is_finished() and rule.reason is None, k
    rule.add({"a": 100.0, "b": 50.0})
    assert rule.is_finished() and rule.reason == NOISE and rule.rounds == SETTINGS.min_samples


def test_one_noisy_series_keeps_the_rule_sampling_until_the_time_limit():
    clock = FakeClock()
    rule = StoppingRule(SETTINGS, clock)
    noisy = [100.0, 150.0]
    while not rule.is_finished():
        rule.add({"quiet": 100.0, "noisy": noisy[rule.rounds % 2]})
        clock.spend_us(300_000)  # 0.3 s a round: past the 1 s limit after the fourth round
    assert rule.reason == TIME_LIMIT
    assert rule.rounds == SETTINGS.min_samples  # the limit is looked at only once min_samples are in
    assert rule.noise("quiet") == 0.0 and rule.noise("noisy") > SETTINGS.target_rel_noise


def test_the_rule_stops_at_max_samples_when_time_is_left():
    rule = StoppingRule(SETTINGS, FakeClock())
    while not rule.is_finished():
        rule.add({"noisy": [100.0, 150.0][rule.rounds % 2]})
    assert rule.reason == MAX_SAMPLES and rule.rounds == SETTINGS.max_samples


def test_quiet_wins_over_the_time_limit_in_the_same_round():
    clock = FakeClock()
    rule = StoppingRule(SETTINGS, clock)
    clock.spend_us(5e6)
    for _ in range(SETTINGS.min_samples):
        rule.add({"a": 10.0})
    assert rule.reason == NOISE


def test_relative_noise_is_the_summarys():
    rng = random.Random(7)
    for count in (1, 2, 3, 10, 101):
        values = [rng.lognormvariate(3.0, 0.4) for _ in range(count)]
        assert relative_noise(values) == pytest.approx(summarize(values).rel_noise, rel=1e-12)
    assert relative_noise([0.0, 0.0]) == float("inf")


# --- the sampler over callables ---------------------------------------------------------------------------


def test_interleaved_rounds_on_every_input_set_with_exact_samples():
    clock = FakeClock()
    a_sets = [FakeLaunch(clock, [10.0]), FakeLaunch(clock, [30.0])]
    b = FakeLaunch(clock, [5.0])
    settings = TimingSettings(warmup=2, min_samples=6, max_samples=6, target_rel_noise=1e-9)
    measured, (ratio,) = measure(
        {"a": _subject(*a_sets, prepare_us=42.0), "b": _subject(b, b)}, CPU, settings, [("a", "b")], clock
    )
    a = measured["a"]
    assert a.samples_us == [10.0, 30.0] * 3  # set r mod 2 in round r
    assert measured["b"].samples_us == [5.0] * 6
    assert a.stop_reason == MAX_SAMPLES and a.mode == "host" and a.clock == "host"
    assert [s.calls for s in a_sets] == [1 + 1 + 3, 1 + 3]  # check + warm-up (2 rounds) + samples
    assert ratio.median == pytest.approx(4.0) and ratio.rounds == 6
    assert a.prepare_us == 42.0 and a.to_json()["prepare_us"] == 42.0
    assert measured["b"].prepare_us is None and "prepare_us" not in measured["b"].to_json()


def test_a_launch_that_leaves_the_poison_is_an_error_not_a_fast_time():
    clock = FakeClock()
    idle = FakeLaunch(clock, [0.5], writes=False)
    with pytest.raises(NoKernelWork, match="idle: the output is still all NaN"):
        measure({"idle": _subject(idle)}, CPU, SETTINGS, clock=clock)
    assert idle.calls == 1  # refused before any warm-up or sample


def test_the_no_work_check_on_graphs_with_fakes():
    out = torch.zeros(3, 4)
    with pytest.raises(NoKernelWork, match="no nodes"):
        check_did_work(out, 0, "g")
    check_did_work(out, None, "g")  # no node count: the output decides
    check_did_work(out, 7, "g")
    check_did_work(torch.zeros(0), None, "g")  # an empty output has nothing to poison
    check_did_work(torch.full((2,), float("nan")).int(), None, "g")  # integers carry no poison

    def replay_that_writes() -> None:
        out.fill_(2.0)

    verify_call(replay_that_writes, out, lambda: None, 3, "g")  # poisoned, replayed, written: fine
    with pytest.raises(NoKernelWork, match="still all NaN"):
        verify_call(lambda: None, out, lambda: None, 3, "g")  # a replay that does nothing
    assert bool(out.isnan().all())  # verify_call poisoned it before the call


def test_an_empty_capture_is_recognised_and_an_unaskable_graph_counts_as_unknown():
    assert warned_empty(["The CUDA Graph is empty. This usually means that the graph was attempted ..."])
    assert not warned_empty(["some other warning"]) and not warned_empty([])

    class NotKept:
        def raw_cuda_graph(self):
            raise RuntimeError("keep_graph=False")

    class NullGraph:
        def raw_cuda_graph(self):
            return 0

    assert graph_node_count(NotKept()) is None and graph_node_count(NullGraph()) is None
    assert graph_node_count(object()) is None


def test_cpu_timing_pins_threads_and_records_the_count():
    clock = FakeClock()
    seen: list[int] = []

    class Recording(FakeLaunch):
        def __call__(self) -> torch.Tensor:
            seen.append(torch.get_num_threads())
            return super().__call__()

    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        for wanted in (1, 2):
            seen.clear()
            settings = TimingSettings(warmup=0, min_samples=3, max_samples=3, cpu_threads=wanted)
            measured, _ = measure({"a": _subject(Recording(clock, [1.0]))}, CPU, settings, clock=clock)
            assert set(seen) == {wanted} and torch.get_num_threads() == 3
            assert measured["a"].cpu_threads == wanted and measured["a"].to_json()["cpu_threads"] == wanted
    finally:
        torch.set_num_threads(before)


def test_torch_threads_restores_the_count_after_an_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="inside"), torch_threads(1) as count:
        assert count == 1 and torch.get_num_threads() == 1
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError), torch_threads(0):
        pass


# --- cold L2 ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reported", "expected"),
    [
        (None, 2 * 128 * 2**20),  # not reported: the largest target L2, twice over
        (0, 2 * 128 * 2**20),
        (50 * 2**20, 2 * 128 * 2**20),  # an H200's 50 MiB: still at least the RTX PRO 6000's
        (128 * 2**20, 2 * 128 * 2**20),
        (192 * 2**20, 2 * 192 * 2**20),  # a larger L2 than any target: twice what it reports
    ],
)
def test_the_l2_flush_covers_at_least_the_largest_target_l2(reported, expected):
    assert l2_flush_bytes(reported) == expected
    assert l2_flush_bytes(reported) >= LARGEST_TARGET_L2_BYTES


# --- from backends to launches: the prepare/launch split --------------------------------------------------


class TwoPhase:
    """Counts its preparations and launches; spends 7 us preparing and 3 us per launch."""

    name = "two-phase"

    def __init__(self, clock: FakeClock) -> None:
        self.clock, self.prepares, self.launches = clock, 0, 0

    def availability(self) -> Availability:
        return Availability.yes("test")

    def prepare(self, inputs):
        self.prepares += 1
        self.clock.spend_us(7.0)
        answer = ReferenceBackend().run(inputs)

        def launch() -> torch.Tensor:
            self.launches += 1
            self.clock.spend_us(3.0)
            inputs.o_extend.copy_(answer)
            return inputs.o_extend

        return launch

    def run(self, inputs):
        return self.prepare(inputs)()


class RunOnly:
    """A plug-in with `run` alone: it keeps working, all of its call timed."""

    name = "run-only"

    def __init__(self, clock: FakeClock) -> None:
        self.clock, self.runs = clock, 0

    def availability(self) -> Availability:
        return Availability.yes("test")

    def run(self, inputs):
        self.runs += 1
        self.clock.spend_us(11.0)
        inputs.o_extend.copy_(ReferenceBackend().run(inputs))
        return inputs.o_extend


def _inputs():
    return generate_inputs(one_case(prefix=5, tree={"kind": "chain", "length": 2}))


def test_prepare_runs_outside_the_timed_samples_and_is_reported_beside_them():
    clock = FakeClock()
    backend, plugin = TwoPhase(clock), RunOnly(clock)
    sets = [_inputs(), _inputs()]
    settings = TimingSettings(warmup=1, min_samples=4, max_samples=4)
    measured, _ = measure_backends({"two-phase": backend, "run-only": plugin}, sets, settings, clock=clock)
    assert backend.prepares == PREPARE_SAMPLES  # once per set, then again up to the prepare samples
    assert backend.launches == 1 + 1 + 4  # the no-work check, warm-up, samples: never re-prepared
    assert measured["two-phase"].samples_us == [3.0] * 4  # the launch alone
    assert measured["two-phase"].prepare_us == 7.0
    assert measured["run-only"].samples_us == [11.0] * 4 and measured["run-only"].prepare_us is None
    assert plugin.runs == 1 + 1 + 4


def test_timing_subject_keeps_one_launch_per_set_and_their_poison_hooks():
    clock = FakeClock()
    sets = [_inputs(), _inputs(), _inputs()]
    subject = timing_subject(TwoPhase(clock), sets, clock)
    assert len(subject.launches) == 3 and len(subject.before) == 3
    out = subject.launches[1]()
    assert out.data_ptr() == sets[1].o_extend.data_ptr()
    subject.before[1]()
    assert bool(sets[1].o_extend.isnan().all())  # the hook re-poisons that set's output


def test_capabilities_are_declared_with_defaults_for_plugins():
    assert capabilities(RunOnly(FakeClock())) == Capabilities()
    assert capabilities(ReferenceBackend()).lse is False
    from ddbench.backends.cuda_emu import CudaEmuBackend
    from ddbench.explain.mutants import get_mutant

    assert capabilities(CudaEmuBackend()) == Capabilities(lse=True)
    assert capabilities(get_mutant("mutant:mask-stride")).hypothesis == "mask-stride"
    assert capabilities(get_mutant("mutant-emu:draft-missing")) == Capabilities(
        lse=True, hypothesis="draft-missing"
    )

    class Odd(RunOnly):
        capabilities = "lse"  # not a Capabilities: ignored

    assert capabilities(Odd(FakeClock())) == Capabilities()
    with pytest.raises(ValueError, match="run-only does not declare an LSE output"):
        prepared(RunOnly(FakeClock()), _inputs(), lse=torch.empty(0))


# --- overrides and the remedy -----------------------------------------------------------------------------


def test_command_line_overrides_replace_only_what_is_given():
    base = TimingSettings(max_rel_noise=0.1, max_seconds=3.0)
    assert with_overrides(base) == base
    assert with_overrides(base, max_rel_noise=0.25) == TimingSettings(max_rel_noise=0.25, max_seconds=3.0)
    assert with_overrides(base, max_seconds=20) == TimingSettings(max_rel_noise=0.1, max_seconds=20.0)


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"max_rel_noise": 0.0}, "--max-rel-noise"),
        ({"max_rel_noise": float("nan")}, "--max-rel-noise"),
        ({"max_rel_noise": 11.0}, "--max-rel-noise"),
        ({"max_seconds": -1.0}, "--max-seconds"),
        ({"max_seconds": float("inf")}, "--max-seconds"),
        ({"max_seconds": True}, "--max-seconds"),
    ],
)
def test_a_bad_override_names_its_option(kwargs, option):
    with pytest.raises(InputError) as caught:
        with_overrides(TimingSettings(), **kwargs)
    assert caught.value.path == option


def test_a_noise_refusal_names_its_remedy():
    text = noise_refusal(0.12, 0.10, 40, "time-limit")
    assert text.startswith("noise 12.0 % > limit 10 % (40 samples, stopped by time-limit)")
    for remedy in ("timing.max_rel_noise", "--max-rel-noise", "--max-seconds"):
        assert remedy in text
    assert "658.7 % > limit 500 %" in noise_refusal(6.587, 5.0, 27, "time-limit")


def test_the_run_may_time_only_some_backends_of_a_case():
    """The device check times cuda and triton, not the references its bounds also run."""
    import dataclasses

    from ddbench.inputs.suite_file import load_suite_file
    from ddbench.runner.budgets import budget_for
    from ddbench.suite.budget import Budget

    case = load_suite_file("suites/smoke.json").cases[0]
    assert budget_for(case, True).timed == ()  # every backend the case runs
    assert budget_for(case, True, timed=("cuda", "triton")).timed == ("cuda", "triton")
    own = dataclasses.replace(case, budget=Budget(timed=("reference",)))
    assert budget_for(own, True).timed == ("reference",)  # a suite's own choice stays without an override


class _FakeEvent:
    """A CUDA event whose completion the test decides: `reached` is what query() says after the launch."""

    reached = False
    log: ClassVar[list[str]] = []

    def __init__(self, enable_timing: bool = False) -> None:
        pass

    def record(self) -> None:
        _FakeEvent.log.append("record")

    def query(self) -> bool:
        return _FakeEvent.reached

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _FakeEvent) -> float:
        return 0.012  # ms


@pytest.mark.parametrize("reached", [False, True])
def test_a_sample_says_whether_the_gpu_was_held_until_the_launch_was_queued(monkeypatch, reached):
    """The spin is queued before the start event; a start event already passed once the host has queued the
    launch means the GPU may have waited on the host, and the sample says so."""
    from ddbench.timing import clocks

    _FakeEvent.log, _FakeEvent.reached = [], reached
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: _FakeEvent.log.append(f"sleep {cycles}"))
    us, held = clocks.time_cuda_us(
        lambda: _FakeEvent.log.append("launch"), lambda: _FakeEvent.log.append("flush")
    )
    assert _FakeEvent.log == ["flush", f"sleep {clocks.QUEUE_AHEAD_CYCLES}", "record", "launch", "record"]
    assert us == pytest.approx(12.0) and held is not reached


def test_the_measurement_note_counts_the_samples_not_held():
    from ddbench.timing.sampler import _Timed

    timed = _Timed(
        "k", TimingSubject([lambda: torch.zeros(1)], [lambda: None]), torch.device("cpu"), TimingSettings()
    )
    assert timed.notes(10) is None
    timed.unheld, timed.note = 3, "graph capture failed, timed plain: X"
    assert timed.notes(10) == (
        "graph capture failed, timed plain: X; 3 of 10 samples: the GPU passed the start event before the "
        "launch was queued (they may hold host time)"
    )
