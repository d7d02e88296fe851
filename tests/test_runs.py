"""Runs as a whole: backends from entry points, crash safety of the results file, the relative bound."""

from __future__ import annotations

import json
from importlib.metadata import EntryPoint

import pytest
import torch
from click.testing import CliRunner

from ddbench.backends import Availability, get_backend, known_backend_names, registry
from ddbench.backends.reference import ReferenceBackend
from ddbench.cli.main import cli
from ddbench.metrics import FAIL, PASS, parity_figures
from ddbench.metrics.verdict import judge
from ddbench.runner import run_case
from ddbench.suite import ParityBound, parse_suite

SUITE = {
    "name": "runs",
    "defaults": {"model": "kimi-k2.6", "layout": {"tp": 8}, "prefix": 9},
    "cases": [
        {
            "matrix": {
                "tree": [
                    {"kind": "chain", "length": 3},
                    {"kind": "ddtree", "budget": 4},
                    {"kind": "star", "size": 5},
                ]
            }
        }
    ],
}


class Rounded:
    """Reference rounded to bf16: a correct kernel."""

    name = "rounded"

    def availability(self) -> Availability:
        return Availability.yes("test")

    def run(self, inputs):
        inputs.o_extend.copy_(ReferenceBackend().run(inputs))
        return inputs.o_extend


class Interrupting(Rounded):
    """Correct on the first case, then the user presses Ctrl-C."""

    name = "interrupting"
    calls = 0

    def run(self, inputs):
        Interrupting.calls += 1
        if Interrupting.calls > 1:
            raise KeyboardInterrupt
        return super().run(inputs)


def _entry_points(**objects):
    def fake(group=None):
        assert group == registry.ENTRY_POINT_GROUP
        return [EntryPoint(name, f"{__name__}:{attr}", group) for name, attr in objects.items()]

    return fake


def test_backend_from_the_entry_point_group(monkeypatch):
    monkeypatch.setattr(registry, "entry_points", _entry_points(mine="Rounded"))
    assert "mine" in known_backend_names()
    backend = get_backend("mine")
    assert isinstance(backend, Rounded) and backend.availability().ok


def test_entry_point_that_fails_to_load_is_unavailable(monkeypatch):
    from ddbench.errors import BackendUnavailable

    monkeypatch.setattr(registry, "entry_points", _entry_points(broken="DoesNotExist"))
    with pytest.raises(BackendUnavailable, match="broken"):
        get_backend("broken")


def test_an_interrupted_run_keeps_every_finished_case(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "entry_points", _entry_points(interrupting="Interrupting"))
    Interrupting.calls = 0
    suite = tmp_path / "s.json"
    document = json.loads(json.dumps(SUITE))
    document["defaults"]["parity"] = [{"candidate": "interrupting", "against": "reference", "max_row_ulp": 1}]
    suite.write_text(json.dumps(document))
    out = tmp_path / "results.json"
    result = CliRunner().invoke(cli, ["run", str(suite), "--json", str(out)])
    assert result.exit_code == 130
    assert "Traceback" not in result.output
    saved = json.loads(out.read_text())
    assert saved["complete"] is False
    assert [c["status"] for c in saved["cases"]] == ["pass"]
    assert not list(tmp_path.glob(".results.json.*"))  # no temporary file left behind


def test_a_save_outputs_folder_replaced_by_a_file_stops_the_run_and_says_why(tmp_path, monkeypatch):
    """A traceback (FileExistsError) before; now exit 2 naming the folder, and the results file holds the
    finished cases and says the run is incomplete."""
    import ddbench.runner.sinks as sinks

    saved, real = tmp_path / "outputs", sinks.save_outputs

    def replaced_then_saved(directory, result):
        if saved.is_dir():  # someone replaces the folder by a file while the run goes on
            for child in saved.iterdir():
                child.unlink()
            saved.rmdir()
            saved.write_text("not a folder")
        return real(directory, result)

    monkeypatch.setattr(sinks, "save_outputs", replaced_then_saved)
    suite = tmp_path / "s.json"
    suite.write_text(json.dumps(SUITE))
    out = tmp_path / "results.json"
    args = ["run", str(suite), "--json", str(out), "--save-outputs", str(saved), "--no-timing"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{saved}: --save-outputs: is no longer a folder: cannot save the outputs of" in result.output
    document = json.loads(out.read_text())
    assert document["complete"] is False and len(document["cases"]) == 2  # of 3: the second could not save
    assert saved.read_text() == "not a folder"  # the file that took its place is left alone


def _case():
    return parse_suite(SUITE, "t").cases[0]


def test_relative_bound_passes_within_the_margin_and_fails_beyond():
    from ddbench.inputs import generate_inputs

    x = generate_inputs(_case())
    truth = get_backend("reference-fp64").run(x)
    peer = truth.to(torch.bfloat16)  # a peer with ~0.5 row-ULP error
    good = truth.to(torch.bfloat16)
    bad = (truth * 1.02).to(torch.bfloat16)
    bound = ParityBound("cand", "reference-fp64", (), no_worse_than="peer", margin_row_ulp=1.0)
    peer_figures = parity_figures(peer, truth)
    assert judge(bound, parity_figures(good, truth), "cand", peer_figures).status == PASS
    verdict = judge(bound, parity_figures(bad, truth), "cand", peer_figures)
    assert verdict.status == FAIL and "peer" in verdict.reasons[0]


def test_relative_bound_without_its_peer_is_not_judged():
    document = json.loads(json.dumps(SUITE))
    document["defaults"]["parity"] = [
        {
            "candidate": "reference",
            "against": "reference-fp64",
            "no_worse_than": "triton",
            "margin_row_ulp": 1,
        }
    ]
    case = parse_suite(document, "t").cases[0]
    backends = {n: get_backend(n) for n in ("reference", "reference-fp64")}
    result = run_case(case, backends, torch.device("cpu"))
    (pair,) = result.pairs  # the absolute limits are judged; the relative one says it could not be
    assert pair.verdict.status == PASS and "no_worse_than triton not judged" in pair.verdict.reasons[0]


def test_a_pair_that_compared_nothing_is_not_judged():
    """Every limit holds over 0 elements, which proves nothing: such a pair is left unjudged (skipped, with
    the reason), so a run of only such pairs ends "nothing judged", never "passed"."""
    from ddbench.metrics import SKIPPED
    from ddbench.results.case_result import BackendRun
    from ddbench.runner.execute import _judge_pairs

    case = _case()
    empty = torch.zeros(0, case.heads_per_rank, 512, dtype=torch.bfloat16)
    runs = {n: BackendRun(n, empty, 0.0) for n in ("reference", "reference-fp64", "triton")}
    pairs = _judge_pairs(case, runs)
    assert pairs and all(p.verdict.status == SKIPPED and p.figures is None for p in pairs)
    assert "compared nothing: the outputs hold 0 elements" in pairs[0].verdict.reasons[0]


def test_each_case_runs_only_its_own_backends(tmp_path):
    document = {
        "name": "own",
        "defaults": {
            "model": "kimi-k2.6",
            "layout": {"tp": 8},
            "prefix": 3,
            "parity": [{"candidate": "reference", "against": "reference-fp64", "max_row_ulp": 1}],
        },
        "cases": [
            {
                "label": "a",
                "tree": {"kind": "chain", "length": 2},
                "backends": ["reference", "reference-fp64"],
            },
            {
                "label": "b",
                "tree": {"kind": "chain", "length": 3},
                "backends": ["reference", "reference-fp64", "captured"],
                "parity": [
                    {"candidate": "reference", "against": "reference-fp64", "max_row_ulp": 1},
                    {"candidate": "captured", "against": "reference-fp64", "max_row_ulp": 1},
                ],
            },
        ],
    }
    suite = tmp_path / "s.json"
    suite.write_text(json.dumps(document))
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["run", str(suite), "--json", str(out)])
    saved = json.loads(out.read_text())["cases"]
    assert set(saved[0]["backends"]) == {"reference", "reference-fp64"}  # case a never ran `captured`
    assert saved[1]["backends"]["captured"]["ok"] is False and saved[1]["status"] == "error"
    assert result.exit_code == 1  # a backend error is a failed run


def test_a_plugin_no_bound_judges_is_refused_unless_given_a_template(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "entry_points", _entry_points())
    suite = tmp_path / "s.json"
    suite.write_text(json.dumps(SUITE))  # default bound: triton vs reference
    plugin = f"{__name__}:Rounded"
    refused = CliRunner().invoke(cli, ["run", str(suite), "--backend", plugin, "--backends", "reference"])
    assert refused.exit_code == 2 and "--as" in refused.output and "Traceback" not in refused.output
    document = json.loads(json.dumps(SUITE))
    document["defaults"]["parity"] = [
        {"candidate": "reference", "against": "reference-fp64", "max_row_ulp": 1}
    ]
    suite.write_text(json.dumps(document))
    out = tmp_path / "r.json"
    judged = CliRunner().invoke(
        cli, ["run", str(suite), "--backend", plugin, "--as", "reference", "--json", str(out)]
    )
    assert judged.exit_code == 0, judged.output
    pairs = json.loads(out.read_text())["cases"][0]["pairs"]
    assert {(p["candidate"], p["status"]) for p in pairs} == {("reference", "pass"), ("rounded", "pass")}


class Scribbler(Rounded):
    """Writes into the KV pool: every backend after it would see other inputs."""

    name = "scribbler"

    def run(self, inputs):
        inputs.k_buffer[inputs.kv_indices[0]] += 1
        return super().run(inputs)


def test_a_backend_that_modifies_its_inputs_is_an_error():
    from ddbench.inputs import generate_inputs
    from ddbench.runner.execute import _call, input_fingerprints

    x = generate_inputs(parse_suite(SUITE, "t").cases[0])
    before = input_fingerprints(x)
    assert _call(Rounded(), x).error is None and input_fingerprints(x) == before
    run = _call(Scribbler(), x)
    assert run.output is None and "modified its inputs: k_buffer" in run.error
