"""Progress of a run on the terminal: a bar with the case and its current step, or a line per case in logs."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ddbench.results.case_result import CaseResult
from ddbench.results.modeled_case import ModeledCase
from ddbench.runner.modeled_run import ModeledOutcome
from ddbench.runner.sinks import QuietSink
from ddbench.suite.model import Case


class _CaseBar:
    """A bar over the run's cases (transient on a terminal), or a line per finished case in logs."""

    def __init__(self, console: Console, total: int) -> None:
        self.console, self.total, self.done = console, total, 0
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[case]}"),
            console=console,
            transient=True,
        )
        self.task = self.progress.add_task("cases", total=total, case="")

    def __enter__(self) -> _CaseBar:
        self.progress.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.progress.__exit__(kind, value, tb)

    def _finished(self, line: str) -> None:
        self.done += 1
        if not self.progress.live.is_started or not self.console.is_terminal:
            self.console.print(f"[{self.done}/{self.total}] {line}", highlight=False)
        self.progress.advance(self.task)


class ProgressSink(_CaseBar, QuietSink):
    def step(self, case: Case, what: str) -> None:
        self.progress.update(self.task, case=f"{case.id}: {what}")

    def add(self, result: CaseResult) -> None:
        self._finished(f"{result.status} {result.case.id} ({result.seconds:.2f}s)")


class ModelProgressSink(_CaseBar):
    """The same bar for a modeled run: a case is done when it is counted and modeled."""

    def add(self, modeled: ModeledCase) -> None:
        self._finished(f"modeled {modeled.case_id} ({modeled.profile.modeling_seconds or 0.0:.2f}s)")

    def finish(self, outcome: ModeledOutcome) -> None:
        pass
