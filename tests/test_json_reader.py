"""The one JSON reader (suites, results, baselines): any file ends in a value or an exit-2 error, cheaply."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

import ddbench.bounded_read as bounded_read
from ddbench.cli.main import cli
from ddbench.errors import InputError
from ddbench.results.read import read_results
from ddbench.suite.load import MAX_INT_DIGITS, MAX_JSON_DEPTH, read_json


def _nested(depth: int) -> str:
    return '{"name": "deep", "cases": ' + "[" * depth + "]" * depth + "}"


def _cli_refuses(path, *words):
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    line = result.stderr.strip()
    assert line.startswith(f"invalid: {path}: ") and all(w in line for w in words), line
    return line


@pytest.mark.parametrize("depth", [10**5, 2 * MAX_JSON_DEPTH])
def test_deep_nesting_is_refused(tmp_path, depth):
    # 10^5 overflows the decoder's recursion; twice the limit parses but would recurse in later checks.
    path = tmp_path / "deep.json"
    path.write_text(_nested(depth))
    with pytest.raises(InputError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        read_json(path)
    _cli_refuses(path, "nested deeper")


def test_ordinary_nesting_reads(tmp_path):
    path = tmp_path / "ok.json"
    path.write_text(json.dumps({"a": [[[[{"b": 1}]]]]}))
    assert read_json(path) == {"a": [[[[{"b": 1}]]]]}


def test_long_integers_are_refused(tmp_path):
    path = tmp_path / "int.json"
    path.write_text('{"name": "x", "seed": ' + "9" * 5000 + "}")
    with pytest.raises(InputError) as caught:
        read_json(path)
    assert caught.value.file == str(path) and "an integer of 5000 digits" in caught.value.reason
    _cli_refuses(path, "5000 digits", f"at most {MAX_INT_DIGITS}")
    path.write_text('{"seed": -' + "9" * MAX_INT_DIGITS + "}")
    assert read_json(path) == {"seed": -int("9" * MAX_INT_DIGITS)}


def test_non_regular_files_are_refused_without_reading(tmp_path, monkeypatch):
    fifo = tmp_path / "suite.json"
    os.mkfifo(fifo)

    def no_read(fd, n):
        raise AssertionError("read a file that should have been refused")

    monkeypatch.setattr(bounded_read.os, "read", no_read)
    opened = []
    real_open = os.open
    monkeypatch.setattr(
        bounded_read.os, "open", lambda path, flags, *a: opened.append(flags) or real_open(path, flags, *a)
    )
    with pytest.raises(InputError, match=r"named pipe \(FIFO\), not a regular file"):
        read_json(fifo)  # returns at once: with no writer, a blocking open would wait forever
    assert opened and opened[0] & os.O_NONBLOCK
    with pytest.raises(InputError, match="character device, not a regular file"):
        read_json("/dev/zero")


def test_the_size_limit_is_checked_before_reading(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"pad": "x" * 5000}))
    monkeypatch.setattr(bounded_read.os, "read", lambda fd, n: pytest.fail("read past the size check"))
    with pytest.raises(InputError) as caught:
        read_json(path, max_bytes=1000)
    assert (
        "above the 1000-byte limit" in caught.value.reason and "DDBENCH_MAX_JSON_BYTES" in caught.value.reason
    )
    monkeypatch.setenv("DDBENCH_MAX_JSON_BYTES", "2K")
    with pytest.raises(InputError, match="above the 2048-byte limit"):
        read_json(path)
    monkeypatch.setenv("DDBENCH_MAX_JSON_BYTES", "lots")
    with pytest.raises(InputError, match="DDBENCH_MAX_JSON_BYTES='lots'"):
        read_json(path)


def test_results_files_go_through_the_same_reader(tmp_path):
    path = tmp_path / "results.json"
    path.write_text('{"format": "ddbench-results", "n": ' + "1" * 5000 + "}")
    with pytest.raises(InputError, match="5000 digits"):
        read_results(path)


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_numbers_are_refused_naming_the_field(tmp_path, token):
    """Python's reader takes these as floats; a NaN limit or figure compares false and turns a gate off."""
    path = tmp_path / "suite.json"
    path.write_text('{"name": "s", "cases": [{"prefix": 3, "parity": [{"max_row_ulp": ' + token + "}]}]}")
    with pytest.raises(InputError) as caught:
        read_json(path)
    assert caught.value.file == str(path) and caught.value.path == "cases[0].parity[0].max_row_ulp"
    assert "not a finite number" in caught.value.reason
    _cli_refuses(path, "cases[0].parity[0].max_row_ulp", "not a finite number")
