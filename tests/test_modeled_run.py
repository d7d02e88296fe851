"""The Session's modeled run: cases picked by ID keep their order, an unknown ID is refused before any
count, and the counted launches can be modeled again on other figures to the same result (what a
calibration's fit does many times)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ddbench.errors import InputError
from ddbench.gpus import gpu_spec
from ddbench.inputs.suite_file import load_suite_file
from ddbench.model.calibration import UNCALIBRATED
from ddbench.model.floor import CaseShape
from ddbench.model.tiling_counters import tiling_counters
from ddbench.runner import Session, SessionOptions
from ddbench.runner.modeled_run import ModelRequest

SMOKE = str(Path(__file__).resolve().parents[1] / "suites" / "smoke.json")


@pytest.fixture(scope="module")
def picked(tmp_path_factory):
    cases = [c for c in load_suite_file(SMOKE).cases if "p21" in c.id][:3]
    path = tmp_path_factory.mktemp("c") / "counters.json"
    path.write_text(json.dumps({c.id: tiling_counters(CaseShape.of(c)).to_json() for c in cases}))
    return [c.id for c in cases], str(path)


def _session(ids, counters, gpu="h200"):
    request = ModelRequest(gpu, counters_file=counters, keep_counters=True)
    return Session(SessionOptions(suites=(SMOKE,), case_ids=tuple(ids), model=request))


def test_picked_cases_run_in_the_order_given(picked):
    ids, counters = picked
    outcome = _session(list(reversed(ids)), counters).run_modeled()
    assert [c.case_id for c in outcome.cases] == list(reversed(ids))
    assert all(c.counters_source == "given (--counters)" for c in outcome.cases)


def test_an_unknown_case_id_is_refused_before_anything_is_counted(picked):
    ids, counters = picked
    with pytest.raises(InputError, match="no case 'nope'") as err:
        _session([ids[0], "nope"], counters)
    assert err.value.path == "case_ids"


def test_remodeling_the_same_counts_gives_the_same_figures_and_other_figures_move_them(picked):
    ids, counters = picked
    outcome = _session(ids, counters).run_modeled()

    def figures(profiles):
        return [{k: v for k, v in p.to_json().items() if k != "modeling_seconds"} for p in profiles]

    assert figures(outcome.remodel(outcome.gpu, outcome.calibration)) == figures(outcome.profiles)
    h200 = gpu_spec("h200")
    base = outcome.remodel(h200, UNCALIBRATED)
    slower = outcome.remodel(dataclasses.replace(h200, issue_per_clk=h200.issue_per_clk / 100), UNCALIBRATED)
    assert all(a.launch.modeled_us > b.launch.modeled_us for a, b in zip(slower, base, strict=True))


def test_a_parity_session_has_no_modeled_run():
    session = Session(SessionOptions(suites=(SMOKE,), filter_expr="ddtree and p21"))
    with pytest.raises(ValueError, match=r"SessionOptions\.model"):
        session.run_modeled()


def test_counted_launches_are_kept_only_when_asked(picked):
    """A long profile keeps no counters in memory; a calibration asks for them to model them again."""
    ids, counters = picked
    request = ModelRequest("h200", counters_file=counters)
    outcome = Session(SessionOptions(suites=(SMOKE,), case_ids=tuple(ids), model=request)).run_modeled()
    assert all(c.counters is None for c in outcome.cases)
    with pytest.raises(ValueError, match="keep_counters"):
        outcome.remodel(outcome.gpu)
