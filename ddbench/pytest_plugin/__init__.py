"""pytest plugin (entry point `pytest11`): a suite's cases × backends as pytest-benchmark tests.

    pytest --ddbench-suite suites/smoke.json --ddbench-backends reference,triton -k p21 --benchmark-autosave

How tests appear without a test file (checked with pytest 9; pytest 8 has the same hooks and `config.args`):
when `--ddbench-suite` is given, `pytest_configure` puts the path of the shipped module
`ddbench/pytest_plugin/suite_module.py` into `config.args` (instead of the testpaths/current-folder default
when the command line named no path; beside the named paths otherwise). `Session.perform_collect` collects
`config.args` and treats them as initial paths, which pytest collects whatever their file name
(`python_files` only filters files found by walking a folder). `pytest_generate_tests` then parametrizes the
module's one test with every case × backend, IDs `<case ID>-<backend>`; the cases' tags are added as
keywords, so `-k cpu` selects by tag as `ddbench run -k` does (ID words are pytest's substrings). The
module gets the fixed node ID `ddbench-suite` (`pytest_pycollect_makemodule`): installed outside the
rootdir its path-based ID would be empty, and benchmark names must match between machines to compare.
Without `--ddbench-suite` the plugin adds nothing and imports nothing heavy (it loads in every pytest run
of the environment), and the module's name keeps ordinary collection away from it.

The work behind the tests is a ddbench Session (ddbench/pytest_plugin/bench.py), so the plugin refuses
what `ddbench run` refuses: a backend that no bound judges stops pytest with exit 2 unless `--ddbench-as`
lends it a candidate's bounds or `--ddbench-reference-only` declares it a reference. Each test checks
parity once per case and fails on a parity failure, then times the backend's launch with
`benchmark.pedantic` (host clock; the GPU is synchronised inside the timed call). A project whose pytest
config says `--benchmark-disable` needs `--benchmark-enable` for real timings.

pytest-xdist: `pytest -n N --ddbench-suite ...` spreads the tests over N workers, each pinned to one GPU
where there are several; a worker runs the parity of each case it has a test of (a case split over two
workers is judged on both, with the same seeded inputs). pytest-benchmark disables its timing under xdist
(parity still runs). `--ddbench-json PATH` writes one results file: each worker writes its part, and the
controller merges them into PATH at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

SUITE_MODULE = Path(__file__).with_name("suite_module.py")
PARAM = "ddbench_case_backend"
NODE_ID = "ddbench-suite"
_BENCH = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ddbench", "ddbench suites as benchmarks")
    group.addoption(
        "--ddbench-suite",
        action="append",
        default=[],
        metavar="SUITE",
        help="Suite file whose cases × backends become benchmark tests (repeatable).",
    )
    group.addoption(
        "--ddbench-backends",
        metavar="A,B",
        help="Comma-separated backends (names or module:attr); default: each case's own.",
    )
    group.addoption("--ddbench-as", metavar="BACKEND", help="Judge unnamed backends with this one's bounds.")
    group.addoption(
        "--ddbench-reference-only", metavar="A,B", help="Backends that are only a truth to compare against."
    )
    group.addoption(
        "--ddbench-json", metavar="PATH", help="Results file of the parity runs (merged over -n)."
    )
    group.addoption("--ddbench-rounds", type=int, default=20, help="Timed rounds per test (default 20).")
    group.addoption("--ddbench-warmup", type=int, default=2, help="Untimed warm-up rounds (default 2).")


def _session(config: pytest.Config) -> Any:
    return config.stash.get(_BENCH, None)


def pytest_configure(config: pytest.Config) -> None:
    suites = config.getoption("ddbench_suite", default=None)
    if not suites:
        return
    from ddbench.backends.interpreter_fix import use_interpreter_without_gpu

    use_interpreter_without_gpu()  # before any backend imports Triton, as the CLI does
    from ddbench.backends.registry import split_names
    from ddbench.errors import DdbenchError
    from ddbench.pytest_plugin.bench import SuiteBench
    from ddbench.pytest_plugin.results import results_sinks
    from ddbench.runner import SessionOptions

    backends = split_names(config.getoption("ddbench_backends"))
    options = SessionOptions(
        suites=tuple(suites),
        backends=tuple(backends) if backends is not None else None,
        judge_as=config.getoption("ddbench_as"),
        reference_only=tuple(split_names(config.getoption("ddbench_reference_only")) or ()),
        skip_unavailable=True,  # an unavailable backend's tests skip with the reason
    )
    try:
        sinks = results_sinks(config, suites)
        bench = SuiteBench(
            options, config.getoption("ddbench_rounds"), config.getoption("ddbench_warmup"), sinks
        )
    except DdbenchError as err:
        pytest.exit(f"--ddbench-suite: {err.message}", returncode=err.exit_code)
    config.stash[_BENCH] = bench
    module = str(SUITE_MODULE)
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args[:] = [module]  # no path on the command line: the suite, not testpaths or the folder
    elif module not in config.args:
        config.args.append(module)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    bench = _session(session.config)
    if bench is None:
        return
    bench.finish(complete=exitstatus != pytest.ExitCode.INTERRUPTED)
    from ddbench.pytest_plugin.results import merge_worker_results

    merge_worker_results(session.config)


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """The suite module under a fixed node ID, `ddbench-suite`: wherever ddbench is installed (outside the
    rootdir its path would leave an empty ID), tests read `ddbench-suite::test_ddbench_case[<case>-<backend>]`
    and benchmark names compare across machines."""
    if _session(parent.config) is None or module_path != SUITE_MODULE:
        return None
    return pytest.Module.from_parent(parent, path=module_path, nodeid=NODE_ID)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if PARAM not in metafunc.fixturenames:
        return
    bench = _session(metafunc.config)
    params = bench.params if bench is not None else []
    metafunc.parametrize(PARAM, params, ids=[p.id for p in params])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _session(config) is None:
        return
    for item in items:
        param = getattr(getattr(item, "callspec", None), "params", {}).get(PARAM)
        if param is not None:
            item.extra_keyword_matches.update(param.case.tags)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """GPU, driver, CUDA and library versions, and ddbench's device key: what a timing depends on."""
    bench = _session(config)
    if bench is None:
        return
    from ddbench.pytest_plugin.machine import machine_facts

    machine_info["ddbench"] = machine_facts(bench.device)
