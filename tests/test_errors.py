"""Error messages quote what the user wrote, but never a whole 100 KB of it."""

from __future__ import annotations

import json

from click.testing import CliRunner

from ddbench.cli.main import cli
from ddbench.errors import MAX_LINE_CHARS, BackendUnavailable, InputError, SuiteInvalid, shorten


def test_shorten_keeps_head_and_tail_and_counts_the_cut():
    text = "head-" + "x" * 10_000 + "-tail"
    short = shorten(text)
    assert len(short) <= MAX_LINE_CHARS
    assert short.startswith("head-") and short.endswith("-tail")
    kept = len(short) - len(short[short.index("…") : short.rindex("…") + 1])
    assert f"[{len(text) - kept} characters cut]" in short
    assert shorten("short") == "short"


def test_input_errors_cut_every_part_and_every_line():
    err = InputError("bad value " + "v" * 100_000, file="f" * 100_000 + ".json", path="cases[0]")
    assert len(err.reason) <= MAX_LINE_CHARS and len(err.file) <= MAX_LINE_CHARS
    assert err.file.endswith(".json") and err.path == "cases[0]"
    assert len(err.message) <= 3 * MAX_LINE_CHARS
    many = SuiteInvalid([InputError("r" * 100_000, path=f"cases[{i}]") for i in range(3)])
    assert [len(line) <= 2 * MAX_LINE_CHARS for line in many.message.splitlines()] == [True] * 3
    assert str(many) == many.message  # the list itself is not cut again
    assert len(str(BackendUnavailable("u" * 100_000))) <= MAX_LINE_CHARS


def test_a_100kb_label_is_not_echoed_whole(tmp_path):
    path = tmp_path / "label.json"
    entry = {"model": "kimi-k2.6", "tree": {"kind": "chain", "length": 4}, "label": "a" * 100_000}
    path.write_text(json.dumps({"name": "label", "cases": [entry]}))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"invalid: {path}: cases[0].label: 'aaa")
    assert "characters cut]" in line and line.endswith("' is too long")
    assert len(line) < 2 * MAX_LINE_CHARS
