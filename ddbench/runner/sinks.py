"""Where a Session's results go as they come: the results file, saved outputs, JUnit, markdown, progress.

Every sink's target is checked before the first case runs, so a bad `--junit` path is exit 2 at once, not a
traceback after an hour of cases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ddbench.atomic import check_writable, check_writable_folder, write_atomic
from ddbench.errors import InputError
from ddbench.report.junit import write_junit
from ddbench.report.markdown_summary import summary_markdown
from ddbench.report.saved_outputs import save_outputs
from ddbench.results.case_result import CaseResult
from ddbench.results.document import results_document
from ddbench.results.results_file import ResultsFile
from ddbench.suite.model import Case


class Sink(Protocol):
    """Told of each step, each finished case, and the end of the run (`complete`: every case ran)."""

    def step(self, case: Case, what: str) -> None: ...

    def add(self, result: CaseResult) -> None: ...

    def finish(self, results: Sequence[CaseResult], complete: bool) -> None: ...


class QuietSink:
    """A sink that ignores what it is not interested in."""

    def step(self, case: Case, what: str) -> None:
        pass

    def add(self, result: CaseResult) -> None:
        pass

    def finish(self, results: Sequence[CaseResult], complete: bool) -> None:
        pass


@dataclass(frozen=True)
class RunFacts:
    """What a results document says of the run besides its cases."""

    suites: list[str]
    environment: dict[str, Any]
    shard: str | None = None
    selection: str | None = None  # the -k expression


class ResultsFileSink(QuietSink):
    """The JSON results file, rewritten atomically after every case: a crash loses no finished case."""

    def __init__(self, path: str | Path, facts: RunFacts) -> None:
        self.file = ResultsFile(path, facts.suites, facts.environment, facts.shard, facts.selection)

    def add(self, result: CaseResult) -> None:
        self.file.add(result)

    def finish(self, results: Sequence[CaseResult], complete: bool) -> None:
        if complete:
            self.file.finish()


class SavedOutputsSink(QuietSink):
    def __init__(self, directory: str | Path) -> None:
        self.directory = directory

    def add(self, result: CaseResult) -> None:
        try:
            save_outputs(self.directory, result)
        except OSError as err:  # the folder removed, replaced by a file, made read-only or full mid-run
            folder = Path(self.directory)
            gone = folder.exists() and not folder.is_dir()
            reason = "is no longer a folder" if gone else (err.strerror or str(err))
            # Stopping is the honest end: the outputs asked for are not being kept. The results file
            # already holds this case, and stays a valid, incomplete record of the cases run so far.
            raise InputError(
                f"{reason}: cannot save the outputs of {result.case.id}; the run stopped after this case "
                "(the results file, if any, keeps every finished case, marked incomplete)",
                file=str(self.directory),
                path="--save-outputs",
            ) from None


class JUnitSink(QuietSink):
    def __init__(self, path: str | Path) -> None:
        self.path = path

    def finish(self, results: Sequence[CaseResult], complete: bool) -> None:
        write_junit(self.path, results)


class MarkdownSink(QuietSink):
    def __init__(self, path: str | Path, facts: RunFacts) -> None:
        self.path, self.facts = path, facts

    def finish(self, results: Sequence[CaseResult], complete: bool) -> None:
        f = self.facts
        document = results_document(results, f.suites, f.environment, complete, f.shard, f.selection)
        write_atomic(self.path, summary_markdown(document))


@dataclass(frozen=True)
class OutputPaths:
    """The files and folders a run writes; checked together before the run starts."""

    json: str | None = None
    junit: str | None = None
    markdown: str | None = None
    saved_outputs: str | None = None

    def check(self, inputs: Sequence[str] = ()) -> None:
        """Exit 2 now, naming the option, if a target cannot be written or would overwrite an input."""
        for option, path in (("--json", self.json), ("--junit", self.junit), ("--markdown", self.markdown)):
            if path:
                check_writable(path, option, inputs=inputs)
        if self.saved_outputs:
            check_writable_folder(self.saved_outputs, "--save-outputs", inputs=inputs)

    def sinks(self, facts: RunFacts) -> list[Sink]:
        out: list[Sink] = []
        if self.json:
            out.append(ResultsFileSink(self.json, facts))
        if self.saved_outputs:
            out.append(SavedOutputsSink(self.saved_outputs))
        if self.junit:
            out.append(JUnitSink(self.junit))
        if self.markdown:
            out.append(MarkdownSink(self.markdown, facts))
        return out
