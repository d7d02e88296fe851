"""`ddbench merge`: shards of a run merged back equal the unsharded run; overlaps and bad inputs refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ddbench.cli.main import cli
from ddbench.errors import InputError
from ddbench.results.merge import merge_results
from ddbench.results.schema import results_problems

SUITE = {
    "name": "shards",
    "defaults": {
        "model": "kimi-k2.6",
        "layout": {"tp": 8},
        "parity": [{"candidate": "reference", "against": "reference-fp64", "max_row_ulp": 3.0}],
    },
    "cases": [
        {
            "matrix": {
                "prefix": [0, 5, 33],
                "tree": [{"kind": "chain", "length": 2}, {"kind": "star", "size": 3}],
            }
        },
        {"label": "ragged", "batch_size": 2, "prefix": [4, 12], "tree": {"kind": "chain", "length": 3}},
    ],
}


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("merge")
    suite = tmp / "suite.json"
    suite.write_text(json.dumps(SUITE))
    paths = {name: tmp / f"{name}.json" for name in ("all", "1", "2")}
    common = ["run", str(suite), "--backends", "reference,reference-fp64", "--no-timing"]
    assert invoke(*common, "--json", str(paths["all"])).exit_code == 0
    for i in ("1", "2"):
        assert invoke(*common, "--shard", f"{i}/2", "--json", str(paths[i])).exit_code == 0
    return paths


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_merged_shards_equal_the_unsharded_run(shards, tmp_path):
    out = tmp_path / "merged.json"
    result = invoke("merge", str(shards["1"]), str(shards["2"]), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "merged 2 files, 7 cases" in result.output
    merged, whole = load(out), load(shards["all"])
    assert results_problems(merged) == []
    statuses = {c["id"]: c["status"] for c in merged["cases"]}
    assert statuses == {c["id"]: c["status"] for c in whole["cases"]}
    assert len(merged["cases"]) == len(whole["cases"]) == 7
    assert merged["summary"] == whole["summary"] == {"pass": 7}
    assert merged["complete"] and merged["finished"] is not None
    assert merged["suites"] == whole["suites"]
    assert merged["environment"] == load(shards["1"])["environment"]
    assert [s["file"] for s in merged["shards"]] == [str(shards["1"]), str(shards["2"])]
    assert [s["cases"] for s in merged["shards"]] == [4, 3]
    assert all("environment" in s for s in merged["shards"])


def test_duplicate_case_ids_are_refused_naming_both_files(shards, tmp_path):
    copy = tmp_path / "copy.json"
    copy.write_text(shards["1"].read_text())
    out = tmp_path / "merged.json"
    result = CliRunner().invoke(cli, ["merge", str(shards["1"]), str(copy), "-o", str(out)])
    assert result.exit_code == 2
    assert str(shards["1"]) in result.output and str(copy) in result.output
    assert "shards must not overlap" in result.output
    assert not out.exists()


def test_incomplete_input_makes_an_incomplete_merge(shards):
    partial = load(shards["2"])
    partial.update(complete=False, finished=None)
    merged = merge_results([("a.json", load(shards["1"])), ("b.json", partial)])
    assert merged["complete"] is False and merged["finished"] is None
    assert [s["complete"] for s in merged["shards"]] == [True, False]


def test_a_merge_of_merges_keeps_every_shard(shards):
    first = merge_results([("1.json", load(shards["1"]))])
    again = merge_results([("m.json", first), ("2.json", load(shards["2"]))])
    assert [s["file"] for s in again["shards"]] == ["1.json", "2.json"]
    assert len(again["cases"]) == 7 and results_problems(again) == []


def test_invalid_inputs_exit_2(shards, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "ddbench-results", "version": 1}')
    result = CliRunner().invoke(cli, ["merge", str(shards["1"]), str(bad), "-o", str(tmp_path / "o.json")])
    assert result.exit_code == 2 and "does not match the results schema" in result.output
    result = CliRunner().invoke(cli, ["merge", str(tmp_path / "none.json"), "-o", str(tmp_path / "o.json")])
    assert result.exit_code == 2 and "no such file" in result.output
    with pytest.raises(InputError, match="nothing to merge"):
        merge_results([])


def test_a_case_verdict_is_recomputed_from_its_pairs(shards, tmp_path):
    """A file whose case says "pass" over a failing pair merged as "1 pass; complete"."""
    forged = load(shards["1"])
    case = forged["cases"][0]
    case["pairs"][0]["status"] = "fail"
    case["pairs"][0]["reasons"] = ["max_row_ulp 9 > 3"]
    assert case["status"] == "pass"  # the case's own word, left as the forger wrote it
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(forged))
    out = tmp_path / "merged.json"
    result = CliRunner().invoke(cli, ["merge", str(path), str(shards["2"]), "-o", str(out)])
    merged = load(out)
    assert {c["id"]: c["status"] for c in merged["cases"]}[case["id"]] == "fail"
    assert merged["summary"] == {"pass": 6, "fail": 1}
    assert result.exit_code == 0 and "(1 fail, 6 pass; complete)" in result.output


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_results_file_with_a_non_finite_number_is_refused_and_nothing_written(shards, tmp_path, value):
    """merge read NaN figures and wrote them back as NaN tokens, which no JSON reader but Python's takes."""
    text = json.dumps(load(shards["1"]))
    assert '"max_row_ulp": ' in text
    head, tail = text.split('"max_row_ulp": ', 1)
    number_end = min(i for i in (tail.find(","), tail.find("}")) if i >= 0)
    path = tmp_path / "nan.json"
    path.write_text(f'{head}"max_row_ulp": {value}{tail[number_end:]}')
    out = tmp_path / "merged.json"
    result = CliRunner().invoke(cli, ["merge", str(path), str(shards["2"]), "-o", str(out)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{path}: cases[0].case.parity[0].max_row_ulp: is " in result.output
    assert "not a finite number" in result.output and not out.exists()
