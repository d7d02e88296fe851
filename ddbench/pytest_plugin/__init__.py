"""pytest plugin (entry point `pytest11`): a suite's cases × backends as pytest-benchmark tests.

    pytest --ddbench-suite suites/smoke.json --ddbench-backends reference,triton -k p21 --benchmark-autosave

How tests appear without a test file (checked with pytest 9; pytest 8 has the same hooks and `config.args`):
when `--ddbench-suite` is given, `pytest_configure` puts the path of the shipped module
`ddbench/pytest_plugin/suite_module.py` into `config.args` (instead of the testpaths/current-folder default
when the command line named no path; beside the named paths otherwise). `Session.perform_collect` collects
`config.args` and treats them as initial paths, which pytest collects whatever their file name
(`python_files` only filters files found by walking a folder). `pytest_generate_tests` then parametrizes the
module's one test with every case × backend, IDs `<case ID>-<backend>`; the cases' tags are added as
keywords, so `-k cpu` selects like `ddbench run -k`. The module gets the fixed node ID `ddbench-suite`
(`pytest_pycollect_makemodule`): installed outside the rootdir its path-based ID would be empty, and
benchmark names must match between machines to compare. Without `--ddbench-suite` the plugin adds nothing
and imports nothing heavy (it loads in every pytest run of the environment), and the module's name keeps
ordinary collection away from it.

Each test checks parity once per case and fails on a parity failure, then times the backend with
`benchmark.pedantic` (host clock; the GPU is synchronised inside the timed call). A project whose pytest
config says `--benchmark-disable` needs `--benchmark-enable` for real timings; under xdist (`-n`)
pytest-benchmark disables timing itself (parity still runs).
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
    from ddbench.inputs.suite_file import load_suite_file
    from ddbench.pytest_plugin.bench import SuiteBench

    option = config.getoption("ddbench_backends")
    backends = split_names(option)
    try:
        cases = [case for path in suites for case in load_suite_file(path).cases]
        bench = SuiteBench(
            cases, backends, config.getoption("ddbench_rounds"), config.getoption("ddbench_warmup")
        )
    except DdbenchError as err:
        raise pytest.UsageError(f"--ddbench-suite: {err.message}") from None
    config.stash[_BENCH] = bench
    module = str(SUITE_MODULE)
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args[:] = [module]  # no path on the command line: the suite, not testpaths or the folder
    elif module not in config.args:
        config.args.append(module)


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
