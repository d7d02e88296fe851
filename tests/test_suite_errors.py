"""Invalid suite files, each wrong in one way: the error names the file, the JSON path and the reason."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddbench.cli.main import cli
from ddbench.errors import InputError, SuiteInvalid
from ddbench.inputs.suite_file import load_suite_file

ROOT = Path(__file__).resolve().parent.parent
BAD = Path(__file__).resolve().parent / "suites" / "bad"
SHIPPED_SUITES = sorted((ROOT / "suites").glob("*.json"))
CHAIN = {"kind": "chain", "length": 4}

# file -> (JSON path the error must point at, what the reason must say: a substring, or several that must all
# appear). A path of None: the file as a whole.
EXPECTED: dict[str, tuple[str | None, str | tuple[str, ...]]] = {
    # JSON syntax: the reason carries the line and column instead of a JSON path.
    "syntax_error.json": (
        None,
        "not valid JSON: Expecting property name enclosed in double quotes at line 6",
    ),
    # Schema errors.
    "missing_name.json": ("(top level)", "'name' is a required property"),
    "no_cases_no_matrix.json": ("(top level)", "needs one of the fields 'cases', 'matrix'"),
    "unknown_top_field.json": (
        "(top level)",
        "unknown field 'defualts'; known fields: $schema, cases, defaults",
    ),
    "unknown_case_field.json": ("cases[0]", "unknown field 'batchsize'; known fields: backends, batch_size"),
    "batch_size_string.json": ("cases[0].batch_size", "'4' is not of type 'integer'"),
    "negative_prefix.json": ("cases[0].prefix", "-1 is less than the minimum of 0"),
    "unknown_tree_kind.json": ("cases[0].tree.kind", '"binary" is not one of "chain", "star", "kary"'),
    "ddtree_budget_over_limit.json": ("cases[0].tree.budget", "2000 is greater than the maximum of 1024"),
    "dtype_float16.json": ("cases[0].dtype", '"float16" is not one of "bfloat16"'),
    "matrix_value_wrong_type.json": (
        "cases[0].matrix.prefix[1]",
        "expected array or integer or object, got string",
    ),
    "tree_missing_field.json": ("cases[0].tree", "'size' is a required property"),
    # Semantic errors (values that make no sense together).
    "eagle_too_many_draft_tokens.json": (
        "cases[0].tree.num_draft_tokens",
        "num_draft_tokens 20 needs 19 candidates, but steps 2 with topk 2 produce only 6",
    ),
    "parents_not_topological.json": (
        "cases[0].tree.parents[1]",
        "not in topological order: node 1 has parent 2, which must be < 1",
    ),
    "paths_missing_prefix.json": (
        "cases[0].tree.paths[2]",
        "path [1, 0] needs its prefix [1], which is not listed",
    ),
    "heads_not_divisible_by_tp.json": ("cases[0].layout", ("128 heads of deepseek-v3", "attention TP 3")),
    "dp_attention_not_dividing_tp.json": ("cases[0].layout", "tp 8 is not divisible by dp_attention 3"),
    "prefix_list_length.json": (
        "cases[0].prefix",
        "per-request prefix list has 2 entries but batch_size is 3",
    ),
    "prefix_range_inverted.json": ("cases[0].prefix", "prefix range min 50 is above max 10"),
    "unknown_model_preset.json": (
        "cases[0].model",
        "unknown model preset 'llama-3-70b'; known presets: deepseek-r1",
    ),
    "model_without_sm_scale.json": (
        "cases[0].model",
        "a model without a preset needs both heads and sm_scale",
    ),
    "parity_no_limit.json": (
        "cases[0].parity",
        "bound 0 (triton vs reference) sets no limit; give at least one of",
    ),
    "parity_self.json": ("cases[0].parity", "bound 0 compares 'reference' with itself"),
    "duplicate_cases.json": ("cases[2]", "repeats the workload of cases[0]"),
    "kary_too_large.json": (
        "cases[0].tree.depth",
        "a complete 4-ary tree of depth 5 gives q_len 1365, above the limit of 1025",
    ),
    "missing_tree.json": ("cases[0]", "no tree: every case needs a tree spec"),
    # Budget semantics run for every case, whatever else is wrong with it.
    "budget_min_samples_above_max.json": (
        "cases[0].budget",
        "timing.min_samples 100 is above max_samples 10",
    ),
    "budget_ratio_self.json": ("cases[0].budget", "ratio triton/triton compares a backend with itself"),
    "budget_from_defaults_with_another_error.json": (
        "defaults.budget",
        "timing.min_samples 50 is above max_samples 20",
    ),
    # Origins: a value that came from defaults or a matrix point is reported where it was written.
    "defaults_unknown_preset.json": ("defaults.model", "unknown model preset 'kimi-k3'"),
    "matrix_layout_heads.json": ("cases[0].matrix.layout[1]", ("128 heads of deepseek-v3", "attention TP 6")),
    "top_matrix_model.json": ("matrix.model[1]", "unknown model preset 'kimi-k9'"),
}


def _problems(err: InputError) -> list[InputError]:
    return err.errors if isinstance(err, SuiteInvalid) else [err]


def _says(text: str, reason: str | tuple[str, ...]) -> bool:
    return all(part in text for part in ((reason,) if isinstance(reason, str) else reason))


def _matching(
    problems: list[InputError], path: str | None, reason: str | tuple[str, ...]
) -> list[InputError]:
    return [p for p in problems if p.path == path and _says(p.reason, reason)]


def test_table_covers_every_bad_file():
    on_disk = {p.name for p in BAD.glob("*.json")}
    assert on_disk == set(EXPECTED), "every file in tests/suites/bad needs an expected error, and vice versa"
    assert len(on_disk) >= 18


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_load_suite_names_file_path_and_reason(name):
    path, reason = EXPECTED[name]
    file = BAD / name
    with pytest.raises(InputError) as info:
        load_suite_file(file)
    problems = _problems(info.value)
    found = _matching(problems, path, reason)
    assert found, f"no error at {path!r} with {reason!r}; got: {[(p.path, p.reason) for p in problems]}"
    message = found[0].message
    assert message.startswith(f"{file}: ")  # the file first, so editors and CI logs can jump to it
    if path is not None:
        assert f"{file}: {path}: " in message
    assert _says(message, reason)
    assert found[0].file == str(file)
    # The whole exception (what the CLI prints) carries the same line.
    assert message in str(info.value)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_validate_command_exits_2_with_the_message_on_stderr(name):
    path, reason = EXPECTED[name]
    file = BAD / name
    result = CliRunner().invoke(cli, ["validate", str(file)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    expected_line = f"invalid: {file}: " + (f"{path}: " if path else "")
    lines = [
        line for line in result.stderr.splitlines() if line.startswith(expected_line) and _says(line, reason)
    ]
    assert lines, result.stderr
    assert "ok:" not in result.stdout


def test_no_spurious_unknown_field_error(tmp_path):
    """A nested schema error must not also produce an 'unknown field' error naming no field on the case.

    `case_entry` uses allOf + unevaluatedProperties: when a field inside fails, jsonschema counts no
    property of the case as evaluated and reports all of them; `_explain` then prints 'unknown field ;'.
    """
    in_defaults = {
        "name": "d",
        "defaults": {"batch_size": "4"},
        "cases": [{"model": "kimi-k2.6", "tree": CHAIN}],
    }
    in_defaults_file = tmp_path / "in_defaults.json"
    in_defaults_file.write_text(json.dumps(in_defaults))
    offenders = {}
    for file in [*(BAD / name for name in sorted(EXPECTED)), in_defaults_file]:
        try:
            load_suite_file(file)
        except InputError as err:
            bogus = [p.message for p in _problems(err) if p.reason.startswith("unknown field ;")]
            if bogus:
                offenders[file.name] = bogus
    assert not offenders, f"spurious 'unknown field ;' error in {sorted(offenders)}"


def test_every_problem_of_a_file_is_reported_at_once(tmp_path):
    doc = {
        "name": "many",
        "cases": [
            {"model": "nope", "tree": {"kind": "chain", "length": 4}},
            {"model": "kimi-k2.6", "prefix": {"min": 9, "max": 1}, "tree": {"kind": "chain", "length": 4}},
            {"model": "kimi-k2.6", "tree": {"kind": "parents", "parents": [-1, 0, 5]}},
        ],
    }
    file = tmp_path / "many.json"
    file.write_text(json.dumps(doc))
    with pytest.raises(SuiteInvalid) as info:
        load_suite_file(file)
    paths = [p.path for p in info.value.errors]
    assert paths == ["cases[0].model", "cases[1].prefix", "cases[2].tree.parents[2]"]


def test_missing_file(tmp_path):
    file = tmp_path / "nowhere.json"
    with pytest.raises(InputError) as info:
        load_suite_file(file)
    assert info.value.message == f"{file}: no such file"
    result = CliRunner().invoke(cli, ["validate", str(file)])
    assert result.exit_code == 2
    assert f"invalid: {file}: no such file" in result.stderr
    assert "Traceback" not in result.output


def test_directory(tmp_path):
    with pytest.raises(InputError) as info:
        load_suite_file(tmp_path)
    assert info.value.message == f"{tmp_path}: is a directory, not a suite file"
    result = CliRunner().invoke(cli, ["validate", str(tmp_path)])
    assert result.exit_code == 2
    assert str(tmp_path) in result.stderr
    assert "directory" in result.stderr.lower()
    assert "Traceback" not in result.output


def test_not_utf8(tmp_path):
    file = tmp_path / "latin1.json"
    file.write_bytes(b'{"name": "caf\xe9"}')
    with pytest.raises(InputError) as info:
        load_suite_file(file)
    assert info.value.message.startswith(f"{file}: cannot read")


def test_several_files_report_every_error_and_the_valid_ones(tmp_path):
    good = ROOT / "suites" / "smoke.json"
    missing = tmp_path / "missing.json"
    files = [BAD / "parity_self.json", good, BAD / "syntax_error.json", missing, BAD / "dtype_float16.json"]
    result = CliRunner().invoke(cli, ["validate", *map(str, files)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    invalid = [line for line in result.stderr.splitlines() if line.startswith("invalid: ")]
    for bad in (BAD / "parity_self.json", BAD / "syntax_error.json", missing, BAD / "dtype_float16.json"):
        assert any(line.startswith(f"invalid: {bad}: ") for line in invalid), (bad, result.stderr)
    assert f"ok: {good} (smoke," in result.stdout


def test_list_and_run_report_every_bad_file_too(tmp_path):
    files = [str(BAD / "parity_self.json"), str(BAD / "prefix_list_length.json")]
    for command in (["list", *files], ["run", "--backends", "reference", *files]):
        result = CliRunner().invoke(cli, command)
        assert result.exit_code == 2, (command, result.output)
        assert "Traceback" not in result.output
        assert f"{files[0]}: cases[0].parity: bound 0 compares 'reference' with itself" in result.stderr
        assert f"{files[1]}: cases[0].prefix: per-request prefix list has 2 entries" in result.stderr


@pytest.mark.parametrize("suite", SHIPPED_SUITES, ids=lambda p: p.name)
def test_shipped_suites_validate(suite):
    result = CliRunner().invoke(cli, ["validate", str(suite)])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    loaded = load_suite_file(suite)
    assert f"ok: {suite} ({loaded.name}, {len(loaded.cases)} cases)" in result.stdout


def test_smoke_suite_expands_to_its_cases():
    file = ROOT / "suites" / "smoke.json"
    doc = json.loads(file.read_text())
    expected = sum(
        math.prod(map(len, e.get("matrix", {}).values()))
        * (1 + len(e.get("sglang_buffers", {}).get("replay_prefix", [])))
        for e in doc["cases"]
    )
    smoke = load_suite_file(file)
    assert len(smoke.cases) == expected
    assert len({c.id for c in smoke.cases}) == len(smoke.cases)
