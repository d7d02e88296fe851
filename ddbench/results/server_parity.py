"""What `ddbench server-parity` found: each server's run, the gates, and what could not be done.

Statuses: `pass` (every gate passed), `fail` (a gate failed), `error` (a server would not start or answer:
nothing was judged), `unavailable` (this machine cannot run a server: nothing was started).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddbench.metrics import ERROR, FAIL, PASS
from ddbench.metrics.generation_gates import GateCheck

UNAVAILABLE = "unavailable"  # the one status a run of servers has beyond a pair's
EXIT_CODES = {PASS: 0, FAIL: 1, ERROR: 1, UNAVAILABLE: 3}
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Generation:
    """One prompt's greedy continuation as the server returned it."""

    text: str
    token_ids: tuple[int, ...]
    margins: tuple[float, ...]  # top-1 minus top-2 log-probability at each token (a logit margin)
    completion_tokens: int
    spec_verify_ct: int  # verify steps of this request; 0 when speculation did not run
    spec_accept_length: float | None  # completion tokens per verify step, as SGLang computes it

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "token_ids": list(self.token_ids),
            "margins": [round(m, 6) for m in self.margins],
            "completion_tokens": self.completion_tokens,
            "spec_verify_ct": self.spec_verify_ct,
            "spec_accept_length": self.spec_accept_length,
        }


@dataclass
class ServerRun:
    """One server: how it was started, how long it took, what it generated, what its plugin counted."""

    label: str  # "triton" or "ddbench"
    argv: list[str]
    env: dict[str, str]  # the variables this run set (the plugin's), not the whole environment
    log: str  # the server's output, a file beside the report
    ready_seconds: float | None = None
    generate_seconds: float | None = None
    generations: list[Generation] = field(default_factory=list)
    plugin: list[dict[str, Any]] = field(default_factory=list)  # per process: `ddbench apply report --json`
    error: str | None = None

    @property
    def accept_counts(self) -> tuple[int, int]:
        """(completion tokens, verify steps) over every prompt; a request without verify steps did not
        speculate and counts one token a step."""
        tokens = sum(g.completion_tokens for g in self.generations)
        return tokens, sum(g.spec_verify_ct or g.completion_tokens for g in self.generations)

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "argv": self.argv,
            "env": self.env,
            "log": self.log,
            "ready_seconds": self.ready_seconds,
            "generate_seconds": self.generate_seconds,
            "generations": [g.to_json() for g in self.generations],
            "plugin": self.plugin,
            "error": self.error,
        }


@dataclass
class ServerParityReport:
    request: dict[str, Any]
    environment: dict[str, Any]
    unavailable: list[str] = field(default_factory=list)
    runs: list[ServerRun] = field(default_factory=list)
    gates: list[GateCheck] = field(default_factory=list)
    complete: bool = False  # False while a server is still running: the file is rewritten as it goes

    @property
    def status(self) -> str:
        if self.unavailable:
            return UNAVAILABLE
        if any(run.error for run in self.runs):
            return ERROR
        if not self.gates:
            return ERROR  # ran and nothing judged it
        return FAIL if any(g.status == FAIL for g in self.gates) else PASS

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def reasons(self) -> list[str]:
        if self.unavailable:
            return [f"unavailable: {why}" for why in self.unavailable]
        errors = [f"{run.label} server: {run.error}" for run in self.runs if run.error]
        if errors:
            return errors
        if not self.gates:
            return ["no gate judged the run"]
        return [f"{g.gate}: {g.detail}" for g in self.gates if g.status == FAIL]

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "kind": "server-parity",
            "status": self.status,
            "complete": self.complete,
            "reasons": self.reasons(),
            "request": self.request,
            "environment": self.environment,
            "unavailable": self.unavailable,
            "runs": [run.to_json() for run in self.runs],
            "gates": [g.to_json() for g in self.gates],
        }
