"""Reports of a results file: its JSON Schema against real runs, the markdown summary, the plots.

The results files come from `ddbench run` on a tiny CPU suite (reference, reference-fp64, and plug-in
backends that are wrong or crash), with and without `--timing`, so the schema is checked against what the
writer really produces.
"""

from __future__ import annotations

import json
import re
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from ddbench.backends import Availability
from ddbench.backends.reference import ReferenceBackend
from ddbench.cli.main import cli
from ddbench.errors import InputError
from ddbench.report.bandwidth import bytes_read, floor_us, known_bandwidth
from ddbench.report.latency_series import latency_groups
from ddbench.report.markdown_summary import summary_markdown
from ddbench.report.plot_report import bandwidth_floor
from ddbench.report.ulp_distributions import Histogram, figure_distributions
from ddbench.results.document import results_document
from ddbench.results.read import read_results
from ddbench.results.results_file import ResultsFile
from ddbench.results.schema import results_problems, results_schema

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_MODULE = "ddbench_test_reports_plugins"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

QUICK_TIMING = {"warmup": 1, "min_samples": 3, "max_samples": 4, "input_sets": 1, "max_seconds": 0.5}
SUITE = {
    "name": "reports",
    "defaults": {
        "model": "kimi-k2.6",
        "layout": {"tp": 8},
        "parity": [{"candidate": "*", "against": "reference-fp64", "max_row_ulp": 3.0, "mean_row_ulp": 0.5}],
        "budget": {
            "ratios": [{"candidate": "reference", "baseline": "reference-fp64", "max": 1000}],
            "timing": QUICK_TIMING,
        },
        "tags": ["cpu"],
    },
    "cases": [
        {
            "matrix": {
                "prefix": [0, 17],
                "tree": [{"kind": "chain", "length": 2}, {"kind": "star", "size": 3}],
            }
        },
        {"label": "ragged", "batch_size": 2, "prefix": [3, 30], "tree": {"kind": "chain", "length": 2}},
    ],
}


class Scaled:
    """3 % too large: fails every bound."""

    name = "scaled"

    def availability(self) -> Availability:
        return Availability.yes("test")

    def run(self, inputs):
        return (ReferenceBackend().run(inputs) * 1.03).to(torch.bfloat16)


class Crashing(Scaled):
    name = "crashing"

    def run(self, inputs):
        raise RuntimeError("launch failed | out of resources")


def run_cli(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Results files of real runs: parity only, timed (with saved outputs), and one with failures."""
    tmp = tmp_path_factory.mktemp("reports")
    suite = tmp / "suite.json"
    suite.write_text(json.dumps(SUITE))
    out = {name: tmp / f"{name}.json" for name in ("parity", "timed", "failing")}
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, PLUGIN_MODULE, sys.modules[__name__])
        common = ["run", str(suite), "--backends", "reference,reference-fp64"]
        assert run_cli(*common, "--no-timing", "--json", str(out["parity"])).exit_code == 0
        result = run_cli(
            *common,
            "--timing",
            "--json",
            str(out["timed"]),
            "--save-outputs",
            str(tmp / "outputs"),
            "--markdown",
            str(tmp / "timed.md"),
        )
        assert result.exit_code == 0, result.output
        failing = [
            *common,
            "-k",
            "ragged or p17-star3",
            "--no-timing",
            "--backend",
            f"{PLUGIN_MODULE}:Scaled",
            "--backend",
            f"{PLUGIN_MODULE}:Crashing",
            "--json",
            str(out["failing"]),
        ]
        assert run_cli(*failing).exit_code == 1
    out["outputs"], out["markdown"] = tmp / "outputs", tmp / "timed.md"
    return out


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


# --- schema ------------------------------------------------------------------------------------------------


def test_schema_is_valid_draft_2020_12_and_shipped_as_package_data():
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(results_schema())
    assert resources.files("ddbench.results").joinpath("results.schema.json").is_file()
    package_data = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-data]")[1]
    assert '"results/*.json"' in package_data.split("\n[")[0]  # tomllib is 3.11+; the project supports 3.10


@pytest.mark.parametrize("name", ["parity", "timed", "failing"])
def test_real_results_files_match_the_schema(runs, name):
    document = load(runs[name])
    assert results_problems(document) == []
    assert read_results(runs[name]) == document
    timed = [c for c in document["cases"] if c["latency"]]
    assert bool(timed) == (name == "timed")


def test_failing_run_has_every_kind_of_result(runs):
    document = load(runs["failing"])
    statuses = {p["status"] for c in document["cases"] for p in c["pairs"]}
    assert {"pass", "fail", "error"} <= statuses
    errored = [r for c in document["cases"] for r in c["backends"].values() if not r["ok"]]
    assert errored and all("error" in r and "dtype" not in r for r in errored)


def test_partial_and_in_memory_documents_match_the_schema(tmp_path):
    partial = ResultsFile(tmp_path / "r.json", ["s.json"], load_env())
    assert results_problems(load(tmp_path / "r.json")) == []
    assert partial.document["finished"] is None
    assert results_problems(results_document([], ["s.json"], load_env())) == []


def load_env() -> dict[str, Any]:
    from ddbench.environment import environment

    return environment()


def test_schema_rejects_drift(runs):
    document = load(runs["timed"])
    broken = json.loads(json.dumps(document))
    broken["cases"][0]["status"] = "passed"
    del broken["cases"][1]["pairs"][0]["figures"]["max_row_ulp"]
    broken["cases"][2]["latency"]["backends"]["reference"]["clock"] = "wall"
    problems = results_problems(broken)
    assert any(p.startswith("cases[0].status") for p in problems)
    assert any(p.startswith("cases[1].pairs[0].figures") and "max_row_ulp" in p for p in problems)
    assert any(p.startswith("cases[2].latency.backends.reference.clock") for p in problems)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{not json", "not valid JSON"),
        ('{"format": "ddbench-baseline"}', "not a ddbench results file"),
        ('{"format": "ddbench-results", "version": 7}', "version 7"),
        ('{"format": "ddbench-results", "version": 1, "cases": []}', "'started' is a required property"),
    ],
)
def test_report_refuses_missing_or_invalid_files_with_exit_2(tmp_path, content, message):
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InputError, match=message):
        read_results(path)
    result = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "plots")])
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "plots").exists()


# --- markdown ----------------------------------------------------------------------------------------------


def test_run_markdown_is_the_summary_of_its_results_file(runs):
    text = runs["markdown"].read_text()
    assert text == summary_markdown(load(runs["timed"]))
    assert text.startswith("## ddbench: passed — 5 cases (5 passed, 0 failed, 0 errors, 0 skipped)")
    assert "### Failures" not in text
    parity = text.split("### Parity")[1].split("### Latency")[0]
    assert "| case | pair | max row ULP | mean row ULP | verdict |" in parity
    assert parity.count("reference vs reference-fp64 |") == 5
    latency = text.split("### Latency")[1]
    assert "| case | backend | median µs | noise | ratio | budget |" in latency
    assert latency.count("| reference-fp64 |") == 5
    assert "× reference-fp64" in latency  # the interleaved ratio, on the candidate's row


def test_markdown_puts_failures_first(runs):
    text = summary_markdown(load(runs["failing"]))
    assert text.startswith("## ddbench: failed")
    assert text.index("### Failures") < text.index("### Parity")
    failures = text.split("### Failures")[1].split("### Parity")[0]
    assert "scaled vs reference-fp64: fail (max_row_ulp" in failures
    assert "launch failed \\| out of resources" in failures  # pipes escaped
    rows = [line for line in text.split("### Parity")[1].splitlines() if line.startswith("| `")]
    verdicts = [re.split(r"(?<!\\)\|", row)[-2].strip() for row in rows]  # cells split on unescaped pipes
    first_pass = next(i for i, v in enumerate(verdicts) if v == "pass")
    assert all(v.startswith(("**error**", "**fail**")) for v in verdicts[:first_pass])
    assert all(v == "pass" for v in verdicts[first_pass:])
    assert "### Latency" not in text


def test_markdown_caps_long_tables(runs):
    text = summary_markdown(load(runs["parity"]), max_rows=2)
    assert "… and 3 more rows in the results file." in text


def test_report_markdown_only(runs, tmp_path):
    target = tmp_path / "summary.md"
    result = run_cli("report", str(runs["failing"]), "--markdown", str(target))
    assert result.exit_code == 0
    assert target.read_text() == summary_markdown(load(runs["failing"]))
    assert not (runs["failing"].parent / "failing-report").exists()  # only --markdown: no plots
    stdout = run_cli("report", str(runs["parity"]), "--markdown", "-").output
    assert stdout.startswith("## ddbench: passed")


# --- plots -------------------------------------------------------------------------------------------------


def test_report_writes_the_plots(runs, tmp_path):
    out = tmp_path / "plots"
    result = run_cli("report", str(runs["timed"]), "--out", str(out), "--outputs", str(runs["outputs"]))
    assert result.exit_code == 0, result.output
    written = [Path(line) for line in result.stdout.splitlines()]
    names = {p.name for p in written}
    assert names == {"latency_vs_prefix.png", "ulp_per_case.png", "ulp_elements.png"}
    for path in written:
        assert path.parent == out and path.read_bytes().startswith(PNG_MAGIC)


def test_report_without_timing_explains_the_missing_plot(runs):
    result = run_cli("report", str(runs["parity"]))
    assert result.exit_code == 0
    assert "no timed case" in result.stderr
    default = runs["parity"].parent / "parity-report"
    assert [Path(line) for line in result.stdout.splitlines()] == [default / "ulp_per_case.png"]


def test_report_refuses_a_bad_bandwidth_or_outputs_folder(runs, tmp_path):
    assert run_cli("report", str(runs["timed"]), "--bandwidth-gbs", "0").exit_code == 2
    for value in ("nan", "inf"):  # NaN slipped past `<= 0` and drew no floor, silently
        result = run_cli("report", str(runs["timed"]), "--bandwidth-gbs", value)
        assert result.exit_code == 2 and f"{value} is not a finite number" in result.output
    result = run_cli("report", str(runs["timed"]), "--outputs", str(tmp_path / "none"))
    assert result.exit_code == 2 and "no such folder" in result.output


def test_bandwidth_floor_from_known_gpus():
    h200 = {"kind": "cuda", "name": "NVIDIA H200"}
    assert known_bandwidth(h200) == ("H200", 4800.0)
    assert (
        known_bandwidth({"kind": "cuda", "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"})[1] == 1792
    )
    assert known_bandwidth({"kind": "cuda", "name": "NVIDIA GeForce RTX 5090"})[1] == 1792
    assert known_bandwidth({"kind": "cuda", "name": "NVIDIA H100 80GB HBM3"})[1] == 3350
    assert known_bandwidth({"kind": "cuda", "name": "NVIDIA A10"}) is None
    assert known_bandwidth({"kind": "cpu", "name": "x86_64"}) is None
    gbs, title = bandwidth_floor({"kind": "cpu", "name": "x86_64"}, None)
    assert gbs is None and "no known bandwidth floor" in title
    assert bandwidth_floor({"kind": "cpu", "name": "x86_64"}, 1000.0)[0] == 1000.0
    assert bandwidth_floor(h200, None) == (4800.0, "NVIDIA H200 (cuda); floor: H200 at 4.8 TB/s")


def test_bytes_read_counts_kv_queries_and_output():
    case = {"q_len": 4, "heads_per_rank": 8, "batch_size": 2, "prefix_lens": [10, 100]}
    kv = (10 + 4 + 100 + 4) * 1152
    q_and_out = 2 * 4 * 8 * (576 * 2 + 512 * 2)
    assert bytes_read(case) == kv + q_and_out
    assert floor_us(case, 1000.0) == pytest.approx((kv + q_and_out) / 1e12 * 1e6)


def _timed_case(case_id: str, tree_length: int, prefix: int, median: float) -> dict[str, Any]:
    stats = {"median_us": median, "q1_us": median * 0.9, "q3_us": median * 1.1}
    return {
        "id": case_id,
        "case": {
            "model": {"name": "kimi-k2.6"},
            "layout": {"tp": 8, "dp_attention": 1},
            "heads_per_rank": 8,
            "batch_size": 1,
            "page_size": 1,
            "tree": {"kind": "chain", "length": tree_length},
            "prefix_lens": [prefix],
            "q_len": tree_length,
        },
        "latency": {"backends": {"a": stats, "b": {**stats, "median_us": 2 * median}}},
    }


def test_latency_groups_keep_the_groups_with_most_prefixes():
    cases = [_timed_case(f"c{n}-{p}", n, p, 10.0 + p) for n in (1, 2, 3) for p in range(n)]
    cases.append({"id": "untimed", "latency": None})
    groups, left_out = latency_groups(cases, bandwidth_gbs=1000.0, max_groups=2)
    assert left_out == 1
    assert [g.label for g in groups] == ["kimi-k2.6 tp8 h8 bs1 chain3", "kimi-k2.6 tp8 h8 bs1 chain2"]
    assert [p.prefix for p in groups[0].series["a"]] == [0, 1, 2]
    assert [p.median_us for p in groups[0].series["b"]] == [20.0, 22.0, 24.0]
    assert len(groups[0].floor) == 3
    assert latency_groups(cases, bandwidth_gbs=None)[0][0].floor == []


def test_ulp_distributions(runs):
    distributions = figure_distributions(load(runs["failing"])["cases"])
    assert set(distributions) == {"reference vs reference-fp64", "scaled vs reference-fp64"}
    assert all(len(v["max_row_ulp"]) == 2 for v in distributions.values())
    histogram = Histogram.up_to(4.0, bins=8)
    r = torch.randn(3, 2, 16, dtype=torch.float64)
    a = r.to(torch.bfloat16)
    a[0, 0, 0] = float("nan")
    histogram.add(a, r)
    assert histogram.counts.sum() == r.numel() - 1 and histogram.cases == 1


def test_the_commit_can_be_named_where_the_copy_has_another_git(monkeypatch, tmp_path):
    """The device tool's copy of the tree reports the .git it carries; DDBENCH_GIT_COMMIT names the source."""
    from ddbench.environment import git_commit

    monkeypatch.delenv("DDBENCH_GIT_COMMIT", raising=False)
    assert git_commit(tmp_path) is None  # not a repository
    monkeypatch.setenv("DDBENCH_GIT_COMMIT", "189925b")
    assert git_commit(tmp_path) == "189925b"


def test_a_commit_name_that_is_not_hex_is_not_taken(monkeypatch, tmp_path):
    from ddbench.environment import git_commit

    monkeypatch.setenv("DDBENCH_GIT_COMMIT", "$(rm -rf /)")
    assert git_commit(tmp_path) is None
