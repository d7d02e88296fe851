"""Capture paths in suites cannot hurt the tool: regular files only, sized before read, confined to the
suite's folder unless allowed, and no message that quotes the file's bytes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import ddbench.bounded_read as bounded_read
import ddbench.inputs.suite_file as suite_file
from ddbench.cli.main import cli
from ddbench.errors import InputError, SuiteInvalid
from ddbench.inputs.capture_file import read_capture
from ddbench.inputs.suite_file import load_suite_file

CAPTURES = Path(__file__).resolve().parents[1] / "suites" / "captures"
SHIPPED = sorted(CAPTURES.glob("*.safetensors"))
# Looks like a password file; its first eight bytes as a length are 3619251681095544690-ish nonsense.
SECRET = b"root:$6$saltsalt$hashhashhashhash:19000:0:99999:7:::\n"


def _suite(folder: Path, capture: str) -> Path:
    document = {
        "name": "caps",
        "defaults": {
            "backends": ["reference-fp64", "captured"],
            "parity": [{"candidate": "captured", "against": "reference-fp64", "max_row_ulp": 3.0}],
        },
        "cases": [{"capture": capture}],
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "suite.json"
    path.write_text(json.dumps(document))
    return path


def _only_error(path: Path, **kwargs) -> InputError:
    with pytest.raises(SuiteInvalid) as caught:
        load_suite_file(path, **kwargs)
    (err,) = caught.value.errors
    assert err.file == str(path) and err.path == "cases[0].capture"
    return err


@pytest.fixture
def no_reads(monkeypatch):
    """Reading any file but the suite itself fails the test: refusals must come before reading."""
    real_open, real_read, names = os.open, os.read, {}

    def tracked_open(path, flags, *args):
        fd = real_open(path, flags, *args)
        names[fd] = str(path)
        return fd

    def checked_read(fd, n):
        if not names.get(fd, "").endswith("suite.json"):
            pytest.fail(f"read {names.get(fd)}, which should have been refused unread")
        return real_read(fd, n)

    monkeypatch.setattr(bounded_read.os, "open", tracked_open)
    monkeypatch.setattr(bounded_read.os, "read", checked_read)


def test_a_device_is_outside_the_folder_and_not_a_regular_file(tmp_path, no_reads):
    suite = _suite(tmp_path, "/dev/zero")
    err = _only_error(suite)
    assert "outside the suite file's folder" in err.reason and "--allow-captures DIR" in err.reason
    err = _only_error(suite, allow_capture_dirs=["/dev"])
    assert "/dev/zero: is a character device, not a regular file" in err.reason


def test_a_fifo_is_refused_without_blocking(tmp_path, no_reads):
    os.mkfifo(tmp_path / "pipe.safetensors")  # no writer: a blocking open or read would hang here
    err = _only_error(_suite(tmp_path, "pipe.safetensors"))
    assert "named pipe (FIFO), not a regular file" in err.reason


def test_a_non_capture_file_is_named_but_not_quoted(tmp_path):
    (tmp_path / "shadow").write_bytes(SECRET)
    err = _only_error(_suite(tmp_path, "shadow"))
    assert "not a safetensors file: header length field out of range" in err.reason
    length = str(int.from_bytes(SECRET[:8], "little"))
    for leak in (length, "$6$", "saltsalt", "hashhash", "19000"):
        assert leak not in err.message


def test_symlinks_and_dotdot_are_resolved_before_the_check(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copy(SHIPPED[0], outside / "a.safetensors")
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "link.safetensors").symlink_to(outside / "a.safetensors")
    err = _only_error(_suite(folder, "link.safetensors"))
    assert "outside the suite file's folder" in err.reason and "resolves to" in err.reason
    err = _only_error(_suite(folder, "../elsewhere/a.safetensors"))
    assert "outside the suite file's folder" in err.reason
    allowed = load_suite_file(folder / "suite.json", allow_capture_dirs=[outside])
    assert len(allowed.cases) == 1


def test_a_symlink_inside_an_allowed_folder_is_checked_too(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copy(SHIPPED[1], outside / "b.safetensors")
    folder = tmp_path / "suite"
    (folder / "caps").mkdir(parents=True)
    shutil.copy(SHIPPED[0], folder / "caps" / "a.safetensors")
    (folder / "caps" / "b.safetensors").symlink_to(outside / "b.safetensors")
    err = _only_error(_suite(folder, "caps"))
    assert "b.safetensors" in err.reason and "outside the suite file's folder" in err.reason


def test_validate_takes_allow_captures(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copy(SHIPPED[0], outside / "a.safetensors")
    suite = _suite(tmp_path / "suite", str(outside / "a.safetensors"))
    refused = CliRunner().invoke(cli, ["validate", str(suite)])
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert f"invalid: {suite}: cases[0].capture: " in refused.stderr and "--allow-captures" in refused.stderr
    allowed = CliRunner().invoke(cli, ["validate", "--allow-captures", str(outside), str(suite)])
    assert allowed.exit_code == 0, allowed.output


def test_the_size_limit_comes_before_reading(tmp_path, monkeypatch, no_reads):
    shutil.copy(SHIPPED[0], tmp_path / "a.safetensors")
    size = (tmp_path / "a.safetensors").stat().st_size
    with pytest.raises(InputError) as caught:
        read_capture(tmp_path / "a.safetensors", max_bytes=size - 1)
    assert f"is {size} bytes, above the {size - 1}-byte limit" in caught.value.reason
    monkeypatch.setenv("DDBENCH_MAX_CAPTURE_BYTES", "1K")
    err = _only_error(_suite(tmp_path, "a.safetensors"))
    assert "above the 1024-byte limit" in err.reason and "DDBENCH_MAX_CAPTURE_BYTES" in err.reason


def test_a_folder_of_more_captures_than_the_case_limit_is_refused_unread(tmp_path, monkeypatch):
    caps = tmp_path / "caps"
    caps.mkdir()
    for i in range(3):
        shutil.copy(SHIPPED[0], caps / f"c{i}.safetensors")
    monkeypatch.setattr(suite_file, "read_capture", lambda path: pytest.fail("read before counting"))
    err = _only_error(_suite(tmp_path, "caps"), max_cases=2)
    assert "holds 3 capture files, above the limit of 2" in err.reason and "--max-cases" in err.reason


def test_replayed_inputs_checksum_the_bytes_they_read(tmp_path):
    from ddbench.inputs import generate_inputs

    shutil.copy(SHIPPED[0], tmp_path / "a.safetensors")
    (case,) = load_suite_file(_suite(tmp_path, "a.safetensors")).cases
    assert case.capture.sha256 == read_capture(tmp_path / "a.safetensors").sha256
    shutil.copy(SHIPPED[1], tmp_path / "a.safetensors")
    with pytest.raises(InputError, match="the capture changed since the suite was loaded"):
        generate_inputs(case)


def test_capture_info_refuses_special_files(tmp_path, no_reads):
    os.mkfifo(tmp_path / "pipe.safetensors")
    result = CliRunner().invoke(cli, ["capture-info", str(tmp_path / "pipe.safetensors"), "/dev/zero"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "pipe.safetensors: is a named pipe (FIFO)" in result.stderr
    assert "/dev/zero: is a character device" in result.stderr
