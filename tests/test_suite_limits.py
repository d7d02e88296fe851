"""Suites that would cost too much are refused before they cost it; duplicates are found by full hashes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import ddbench.suite.load as suite_load
from ddbench.cli.main import cli
from ddbench.errors import InputError, SuiteInvalid
from ddbench.inputs.suite_file import load_suite_file
from ddbench.suite import parse_suite
from ddbench.suite.case_count import DEFAULT_MAX_CASES, entry_case_counts

CHAIN = {"kind": "chain", "length": 4}
# Seven fields of ten values each: 10^7 cases from well under 1 KB of JSON.
HUGE = {
    "name": "huge",
    "cases": [
        {
            "model": "kimi-k2.6",
            "tree": CHAIN,
            "matrix": {
                "prefix": list(range(10)),
                "batch_size": list(range(1, 11)),
                "seed": list(range(10)),
                "page_size": [1] * 10,
                "tree": [{"kind": "chain", "length": n} for n in range(1, 11)],
                "layout": [{"tp": 1}] * 10,
                "model": ["kimi-k2.6"] * 10,
            },
        }
    ],
}


def _write(tmp_path, document, name="suite.json"):
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


def test_counts_are_products_of_matrix_lengths():
    doc = {
        "name": "n",
        "matrix": {"prefix": [0, 1, 2], "seed": [0, 1]},
        "cases": [{"tree": CHAIN}, {"matrix": {"batch_size": [1, 2, 4, 8], "capture": ["a", "b"]}}],
    }
    assert entry_case_counts(doc) == [("matrix", 6), ("cases[0]", 1), ("cases[1].matrix", 8)]
    assert entry_case_counts(HUGE) == [("cases[0].matrix", 10**7)]


def test_a_huge_matrix_is_refused_before_anything_is_expanded(tmp_path, monkeypatch):
    def never(document):
        raise AssertionError("expanded a suite that is over the limit")

    monkeypatch.setattr(suite_load, "expand_document", never)
    path = _write(tmp_path, HUGE)
    assert path.stat().st_size < 1400
    with pytest.raises(InputError) as caught:
        load_suite_file(path)
    err = caught.value
    assert not isinstance(err, SuiteInvalid)
    assert (err.file, err.path) == (str(path), "cases[0].matrix")
    assert "10000000 cases" in err.reason and f"limit of {DEFAULT_MAX_CASES}" in err.reason
    assert "--max-cases N" in err.reason


def test_validate_refuses_it_with_exit_2_and_takes_max_cases(tmp_path):
    path = _write(tmp_path, HUGE)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"invalid: {path}: cases[0].matrix: the suite expands to 10000000 cases" in result.stderr

    six = _write(
        tmp_path,
        {
            "name": "six",
            "cases": [{"model": "kimi-k2.6", "tree": CHAIN, "matrix": {"prefix": list(range(6))}}],
        },
        "six.json",
    )
    refused = CliRunner().invoke(cli, ["validate", "--max-cases", "5", str(six)])
    assert refused.exit_code == 2 and "6 cases, above the limit of 5" in refused.stderr
    allowed = CliRunner().invoke(cli, ["validate", "--max-cases", "6", str(six)])
    assert allowed.exit_code == 0 and f"ok: {six} (six, 6 cases)" in allowed.stdout


def test_the_total_of_several_entries_counts(tmp_path):
    entry = {"model": "kimi-k2.6", "tree": CHAIN, "matrix": {"prefix": [0, 1, 2, 3]}}
    doc = {"name": "t", "cases": [{**entry, "seed": s} for s in range(3)]}
    with pytest.raises(InputError) as caught:
        parse_suite(doc, "t.json", max_cases=10)
    assert "12 cases (cases[0].matrix alone gives 4)" in caught.value.reason
    assert len(parse_suite(doc, "t.json", max_cases=12).cases) == 12


def test_duplicates_compare_full_hashes_not_the_id_suffix(monkeypatch):
    # With one hex digit in the ID, 40 distinct workloads share suffixes (16 values): none is a duplicate.
    monkeypatch.setattr("ddbench.suite.ids.HASH_CHARS", 1)
    doc = {
        "name": "d",
        "cases": [{"model": "kimi-k2.6", "tree": CHAIN, "matrix": {"prefix": list(range(40))}}],
    }
    cases = parse_suite(doc, "d.json").cases
    suffixes = [c.id.rsplit("-", 1)[1] for c in cases]
    assert len(set(suffixes)) < len(cases)  # the short hashes do collide…
    assert len({c.id for c in cases}) == 40  # …and every case is still there


def test_a_real_duplicate_is_still_found(monkeypatch):
    monkeypatch.setattr("ddbench.suite.ids.HASH_CHARS", 1)
    case = {"model": "kimi-k2.6", "tree": CHAIN}
    with pytest.raises(SuiteInvalid) as caught:
        parse_suite({"name": "d", "cases": [case, {**case, "label": "again"}]}, "d.json")
    (err,) = caught.value.errors
    assert err.path == "cases[1]" and "repeats the workload of cases[0]" in err.reason


def test_distinct_workloads_with_one_id_are_an_error_not_a_duplicate(monkeypatch):
    # Seeds are not in the readable ID: with a one-digit suffix, 40 seeds must give colliding IDs.
    monkeypatch.setattr("ddbench.suite.ids.HASH_CHARS", 1)
    doc = {"name": "d", "cases": [{"model": "kimi-k2.6", "tree": CHAIN, "matrix": {"seed": list(range(40))}}]}
    with pytest.raises(SuiteInvalid) as caught:
        parse_suite(doc, "d.json")
    reasons = [e.reason for e in caught.value.errors]
    assert reasons and all("has the same ID as the different workload" in r for r in reasons)
    assert not any("repeats the workload" in r for r in reasons)


def test_a_budget_error_is_reported_with_the_other_errors_of_its_case(tmp_path):
    doc = {
        "name": "b",
        "cases": [
            {
                "model": "kimi-k2.6",
                "batch_size": 3,
                "prefix": [10, 20],
                "tree": CHAIN,
                "budget": {"ratios": [{"candidate": "triton", "baseline": "triton", "max": 1.5}]},
            }
        ],
    }
    with pytest.raises(SuiteInvalid) as caught:
        parse_suite(doc, "b.json")
    assert sorted(e.path for e in caught.value.errors) == ["cases[0].budget", "cases[0].prefix"]
