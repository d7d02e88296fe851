"""`ddbench baseline update SUITE --model GPU`, `ddbench profile --update-baseline FILE` and `ddbench
baseline diff` of model baselines.

Both writers write the same document through one store with one set of rules: refused (exit 1, the stored
file untouched) when the kernel's parity did not pass, never for noise; a file that is not a model baseline
of the same GPU is never replaced (exit 2); a filter keeps the stored entries of the cases it left out. Diff
shows what changed per case and fails on a count that rose or a modeled time past the tolerance.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddbench.baselines.model_parity import kernel_parity_refusals, refusals_from_results
from ddbench.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "suites" / "smoke.json")
PICK = "ddtree and p21"
COMMITTED = ROOT / "baselines" / "model-rtx-pro-6000" / "smoke.json"


def _invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.mark.slow
def test_update_writes_exactly_what_profile_writes(tmp_path, parity_results):
    by_profile = tmp_path / "profile.json"
    made = _invoke(
        "profile", SMOKE, "-k", PICK, "--gpu", "h200", "--update-baseline", by_profile,
        "--parity-from", parity_results,
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    ran = _invoke("baseline", "update", SMOKE, "-k", PICK, "--model", "h200", "--root", tmp_path / "a")
    assert ran.exit_code == 0, ran.output
    written = tmp_path / "a" / "model-h200" / "smoke.json"
    assert written.read_bytes() == by_profile.read_bytes()
    given = _invoke(
        "baseline", "update", SMOKE, "-k", PICK, "--model", "h200", "--root", tmp_path / "b",
        "--parity-from", parity_results,
    )  # fmt: skip
    assert given.exit_code == 0, given.output
    assert (tmp_path / "b" / "model-h200" / "smoke.json").read_bytes() == by_profile.read_bytes()


def _with_status(source: Path, dest: Path, candidate: str, status: str) -> Path:
    document = json.loads(source.read_text())
    for case in document["cases"]:
        for pair in case["pairs"]:
            if pair["candidate"] == candidate:
                pair["status"] = status
    dest.write_text(json.dumps(document))
    return dest


def test_a_failed_kernel_parity_refuses_and_leaves_the_stored_file(tmp_path, parity_results):
    stored = tmp_path / "model-rtx-pro-6000" / "smoke.json"
    stored.parent.mkdir()
    stored.write_bytes(COMMITTED.read_bytes())
    failed = _with_status(parity_results, tmp_path / "failed.json", "cuda-emu", "fail")
    args = ["baseline", "update", SMOKE, "-k", PICK, "--model", "rtx-pro-6000", "--root", tmp_path]
    result = _invoke(*args, "--parity-from", failed)
    assert result.exit_code == 1
    assert "refused: " in result.output and "parity cuda-emu vs" in result.output
    assert "is unchanged" in result.output
    assert stored.read_bytes() == COMMITTED.read_bytes()


def test_refusals_need_a_passing_kernel_bound_and_every_case():
    passing = {"pairs": [{"candidate": "cuda-emu", "against": "reference-fp64", "status": "pass"}]}
    assert kernel_parity_refusals(passing) == []
    only_triton = {"pairs": [{"candidate": "triton", "against": "reference", "status": "pass"}]}
    assert kernel_parity_refusals(only_triton) == [
        "the kernel's parity was not judged (no passing bound names cuda or cuda-emu)"
    ]
    assert kernel_parity_refusals({**passing, "error": "bad inputs"}) == ["inputs: bad inputs"]
    refused = refusals_from_results(["a", "b"], {"cases": [{"id": "a", **passing}]}, "r.json")
    assert refused == {"a": [], "b": ["not in r.json: its parity was never judged"]}


def test_noise_options_do_not_apply_to_exact_counts(tmp_path):
    result = _invoke("baseline", "update", SMOKE, "--model", "h200", "--root", tmp_path, "--strict")
    assert result.exit_code == 2 and "--strict: counts are exact" in result.output
    result = _invoke("baseline", "update", SMOKE, "--root", tmp_path, "--parity-from", "r.json")
    assert result.exit_code == 2 and "--parity-from: applies only with --model" in result.output
    assert not list(tmp_path.iterdir())


def test_a_filtered_update_keeps_the_other_cases_and_shows_the_change(tmp_path, parity_results):
    stored = tmp_path / "model-rtx-pro-6000" / "smoke.json"
    stored.parent.mkdir()
    document = json.loads(COMMITTED.read_text())
    picked = [c["id"] for c in json.loads(parity_results.read_text())["cases"]]
    document["cases"][picked[0]]["waves"] += 1  # as if the kernel used to take one more wave
    stored.write_text(json.dumps(document))
    args = ["baseline", "update", SMOKE, "-k", PICK, "--model", "rtx-pro-6000", "--root", tmp_path]
    result = _invoke(*args, "--parity-from", parity_results)
    assert result.exit_code == 0, result.output
    assert "waves" in result.output and "-1" in result.output
    assert stored.read_text() == COMMITTED.read_text().rstrip("\n") + "\n"  # the others kept, in order
    document["calibration"] = "fitted elsewhere"
    stored.write_text(json.dumps(document))
    before = stored.read_bytes()
    mixed = _invoke(*args, "--parity-from", parity_results)
    assert mixed.exit_code == 2 and "calibration: stored under calibration 'fitted elsewhere'" in mixed.output
    assert stored.read_bytes() == before


def test_a_stored_baseline_of_nan_is_refused_and_left_alone(tmp_path, parity_results):
    """`update -k` kept the stored cases it did not model: NaN ones were written back as NaN tokens."""
    stored = tmp_path / "model-rtx-pro-6000" / "smoke.json"
    stored.parent.mkdir()
    document = json.loads(COMMITTED.read_text())
    _first(document)["modeled_us"] = float("nan")
    stored.write_text(json.dumps(document))
    before = stored.read_bytes()
    args = ["baseline", "update", SMOKE, "-k", PICK, "--model", "rtx-pro-6000", "--root", tmp_path]
    result = _invoke(*args, "--parity-from", parity_results)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert (
        f"{stored}: cases." in result.output and ".modeled_us: is nan: not a finite number" in result.output
    )
    assert stored.read_bytes() == before


@pytest.mark.parametrize("blocker", ["folder is a file", "symlink loop"])
def test_an_unwritable_model_baseline_is_refused_before_any_work(tmp_path, blocker):
    """Both failed at the write, with a traceback, after the whole suite was modeled."""
    if blocker == "folder is a file":
        (tmp_path / "model-h200").write_text("not a folder")
        expect = "is not a folder"
    else:
        (tmp_path / "model-h200").mkdir()
        (tmp_path / "model-h200" / "smoke.json").symlink_to("smoke.json")
        expect = "refusing to replace it"
    args = ["baseline", "update", SMOKE, "-k", PICK, "--model", "h200", "--root", tmp_path]
    result = _invoke(*args, "--parity-from", tmp_path / "no-results.json")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "model-h200" in result.output and expect in result.output
    assert (tmp_path / "model-h200").is_file() or (tmp_path / "model-h200" / "smoke.json").is_symlink()


def _tampered(tmp_path: Path, change) -> Path:
    document = json.loads(COMMITTED.read_text())
    change(document)
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(document))
    return path


def _first(document):
    return next(iter(document["cases"].values()))


def test_diff_of_the_same_baseline_passes():
    result = _invoke("baseline", "diff", COMMITTED, COMMITTED)
    assert result.exit_code == 0, result.output
    assert "no figure changed" in result.output and "0 regression(s)" in result.output


def test_diff_fails_on_a_tampered_baseline_and_names_the_figure(tmp_path):
    def more_bytes(document):
        _first(document)["unique_dram_bytes"] += 32

    result = _invoke("baseline", "diff", COMMITTED, _tampered(tmp_path, more_bytes))
    assert result.exit_code == 1
    case_id = next(iter(json.loads(COMMITTED.read_text())["cases"]))
    assert f"REGRESSED {case_id}: unique_dram_bytes" in result.output
    assert "+32" in result.output and "1 regression(s), 1 case(s) changed" in result.output
    reverse = _invoke("baseline", "diff", _tampered(tmp_path, more_bytes), COMMITTED)
    assert reverse.exit_code == 0, reverse.output  # fewer bytes is no regression


def test_diff_judges_modeled_time_by_the_tolerance_and_only_under_one_calibration(tmp_path):
    def slower(document):
        _first(document)["modeled_us"] *= 1.03

    path = _tampered(tmp_path, slower)
    assert _invoke("baseline", "diff", COMMITTED, path).exit_code == 1
    assert _invoke("baseline", "diff", COMMITTED, path, "--tolerance", "0.05").exit_code == 0

    def recalibrated(document):
        slower(document)
        document["calibration"] = "fitted elsewhere"

    other = _invoke("baseline", "diff", COMMITTED, _tampered(tmp_path, recalibrated))
    assert other.exit_code == 0 and "modeled times not compared" in other.output


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda d: d.update(gpu="h200"), "gpu: a baseline for 'h200', not 'rtx-pro-6000'"),
        (lambda d: _first(d).update(waves="two"), ".waves: must be a number"),
        (lambda d: d.update(format_version=9), "format_version: format_version 1 expected"),
        # true == 1 in Python; the format's version is the number 1
        (lambda d: d.update(format_version=True), "format_version: format_version 1 expected (got True)"),
        # NaN and Infinity compare false with every limit: "0 regression(s)" against a 10x worse file
        (lambda d: _first(d).update(modeled_us=float("nan")), ".modeled_us: is nan: not a finite number"),
        (lambda d: _first(d).update(l2_bytes=float("inf")), ".l2_bytes: is inf: not a finite number"),
        (lambda d: d.update(calibration=["x"]), "calibration: must be a string"),
    ],
)
def test_diff_of_a_bad_model_baseline_exits_2_naming_file_and_field(tmp_path, change, where):
    path = _tampered(tmp_path, change)
    result = _invoke("baseline", "diff", COMMITTED, path)
    assert result.exit_code == 2
    assert f"{path}: " in result.output and where in result.output, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("kind", ["latency baseline", "results file", "another GPU's model baseline"])
def test_profile_never_replaces_a_file_that_is_not_a_model_baseline_of_its_gpu(
    tmp_path, kind, parity_results
):
    target = tmp_path / "target.json"
    if kind == "latency baseline":
        target.write_bytes((ROOT / "baselines" / "nvidia-h200" / "k26-verify.json").read_bytes())
    elif kind == "results file":
        target.write_bytes(parity_results.read_bytes())
    else:
        target.write_bytes((ROOT / "baselines" / "model-h200" / "smoke.json").read_bytes())
    before = target.read_bytes()
    ran = _invoke(
        "profile", SMOKE, "-k", PICK, "--gpu", "rtx-pro-6000", "--update-baseline", target,
        "--parity-from", parity_results,
    )  # fmt: skip
    assert ran.exit_code == 2, ran.output
    assert "refusing to replace it" in ran.output and "Traceback" not in ran.output
    assert target.read_bytes() == before


def test_a_filtered_profile_update_keeps_the_stored_cases_it_left_out(tmp_path, parity_results):
    target = tmp_path / "smoke.json"
    target.write_bytes(COMMITTED.read_bytes())
    stored = json.loads(COMMITTED.read_text())["cases"]
    ran = _invoke(
        "profile", SMOKE, "-k", PICK, "--gpu", "rtx-pro-6000", "--update-baseline", target,
        "--parity-from", parity_results,
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    after = json.loads(target.read_text())["cases"]
    assert set(after) == set(stored) and len(stored) > 2


def test_profile_update_needs_the_kernels_parity(tmp_path, parity_results):
    failed = _with_status(parity_results, tmp_path / "failed.json", "cuda-emu", "fail")
    ran = _invoke(
        "profile", SMOKE, "-k", PICK, "--update-baseline", tmp_path / "b.json", "--parity-from", failed
    )
    assert ran.exit_code == 1 and "refused:" in ran.output and not (tmp_path / "b.json").exists()


def test_a_profile_update_whose_parity_cannot_run_is_refused_before_any_count(tmp_path):
    """No bound judges the kernel here: the parity run is refused when the command starts, not after the
    modeled run."""
    suite = tmp_path / "unjudged.json"
    suite.write_text(
        '{"name": "unjudged", "cases": [{"model": "kimi-k2.6", "layout": {"tp": 8}, "prefix": 21, '
        '"tree": {"kind": "chain", "length": 4}, "backends": ["reference", "cuda-emu"]}]}'
    )
    ran = _invoke("profile", suite, "--update-baseline", tmp_path / "b.json")
    assert ran.exit_code == 2 and "no parity bound" in ran.output, ran.output
    assert "modeled " not in ran.output and not (tmp_path / "b.json").exists()
