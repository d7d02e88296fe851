"""Where a modeled run's cases go: the profile's JSON (rewritten after every case, so a crash loses no
finished case), its markdown and its plot (at the end). Targets are checked before the first case runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ddbench.atomic import check_writable, write_atomic, write_json_atomic
from ddbench.report.profile_plot import profile_png
from ddbench.report.profile_tables import profile_markdown
from ddbench.results.modeled_case import ModeledCase, profile_document
from ddbench.runner.modeled_run import ModeledOutcome, ModelSink
from ddbench.runner.session import Session


class ProfileJsonSink:
    def __init__(self, path: str | Path, session: Session) -> None:
        assert session.modeled is not None
        self.path, self.run = path, session.modeled
        self.done: list[ModeledCase] = []

    def add(self, modeled: ModeledCase) -> None:
        self.done.append(modeled)
        document = profile_document(self.done, self.run.gpu, self.run.calibration, complete=False)
        write_json_atomic(self.path, document)

    def finish(self, outcome: ModeledOutcome) -> None:
        document = profile_document(outcome.cases, outcome.gpu, outcome.calibration)
        write_json_atomic(self.path, document)


class ProfileMarkdownSink:
    def __init__(self, path: str | Path) -> None:
        self.path = path

    def add(self, modeled: ModeledCase) -> None:
        pass

    def finish(self, outcome: ModeledOutcome) -> None:
        write_atomic(self.path, profile_markdown(outcome.profiles, outcome.gpu, outcome.calibration))


class ProfilePlotSink:
    def __init__(self, path: str | Path) -> None:
        self.path = path

    def add(self, modeled: ModeledCase) -> None:
        pass

    def finish(self, outcome: ModeledOutcome) -> None:
        gpu, calibration = outcome.gpu, outcome.calibration
        title = f"modeled on {gpu.name}\n{calibration.label}; model error {calibration.error_band}"
        write_atomic(self.path, profile_png(outcome.profiles, title))


@dataclass(frozen=True)
class ProfilePaths:
    """The files a modeled run writes; checked together before it starts."""

    json: str | None = None
    markdown: str | None = None
    plot: str | None = None

    def check(self, inputs: Sequence[str] = ()) -> None:
        """Exit 2 now, naming the option, if a target cannot be written or would overwrite an input."""
        for option, path in (("--json", self.json), ("--markdown", self.markdown), ("--plot", self.plot)):
            if path:
                check_writable(path, option, inputs=inputs)

    def sinks(self, session: Session) -> list[ModelSink]:
        out: list[ModelSink] = []
        if self.json:
            out.append(ProfileJsonSink(self.json, session))
        if self.markdown:
            out.append(ProfileMarkdownSink(self.markdown))
        if self.plot:
            out.append(ProfilePlotSink(self.plot))
        return out
