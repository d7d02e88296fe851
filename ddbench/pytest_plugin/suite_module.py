"""The test the ddbench pytest plugin parametrizes: collected only when `--ddbench-suite` is given.

Its file name matches no `python_files` pattern, so pytest never collects it by walking a folder; the plugin
passes its path to the collection itself (see ddbench/pytest_plugin/__init__.py).
"""

from __future__ import annotations

import pytest


@pytest.mark.filterwarnings("ignore:Benchmark fixture was not used")  # parity failed or skipped: not timed
def test_ddbench_case(benchmark, ddbench_case_backend) -> None:
    """One case on one backend: parity first (a failure fails the test), then timed by pytest-benchmark."""
    item = ddbench_case_backend
    if reason := item.bench.unavailable(item.backend) or item.bench.not_judged(item.case, item.backend):
        pytest.skip(reason)
    if problems := item.bench.parity_problems(item.case, item.backend):
        pytest.fail("parity: " + "; ".join(problems), pytrace=False)
    benchmark.group = item.case.id
    benchmark.extra_info.update(item.extra_info())
    item.time(benchmark)
