"""Terminal tables: the expanded cases of a suite, and the verdicts of a run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rich.markup import escape
from rich.table import Table

from ddbench.metrics import ERROR, FAIL, PASS, SKIPPED, Status
from ddbench.results.case_result import CaseResult
from ddbench.suite.model import Case
from ddbench.trees import tree_label

STYLE = {PASS: "green", FAIL: "bold red", ERROR: "bold magenta", SKIPPED: "dim"}


def _status(status: str, detail: str = "") -> str:
    return f"[{STYLE[status]}]{status}[/]" + (f" {escape(detail)}" if detail else "")


def _prefix_text(prefix_lens: tuple[int, ...]) -> str:
    if len(set(prefix_lens)) == 1:
        return str(prefix_lens[0])
    shown = ",".join(map(str, prefix_lens[:6]))
    return shown + ("…" if len(prefix_lens) > 6 else "")


def cases_table(cases: Sequence[Case], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("case", "model", "tp", "heads/rank", "bs", "prefix", "tree", "q_len", "page", "tags"):
        table.add_column(column, overflow="fold")
    for c in cases:
        tp = f"{c.layout.tp}" + (f" dp{c.layout.dp_attention}" if c.layout.dp_attention > 1 else "")
        table.add_row(
            c.id,
            c.model.name,
            tp,
            str(c.heads_per_rank),
            str(c.batch_size),
            _prefix_text(c.prefix_lens),
            tree_label(c.tree),
            f"{min(c.q_lens)}-{c.q_len}" if c.ragged_q else str(c.q_len),
            str(c.page_size),
            ",".join(c.tags),
        )
    return table


def skipped_summary(results: Sequence[CaseResult]) -> str | None:
    """One line for the pairs left out of the table: bounds naming backends this run did not select."""
    reasons = Counter(
        reason
        for r in results
        for p in r.pairs
        if p.verdict.status == SKIPPED
        for reason in p.verdict.reasons
    )
    if not reasons:
        return None
    return "not judged: " + ", ".join(f"{n} pairs ({reason})" for reason, n in reasons.most_common())


def results_table(results: Sequence[CaseResult]) -> Table:
    table = Table(title="parity", title_justify="left")
    table.add_column("case", no_wrap=True)
    table.add_column("pair", no_wrap=True)
    for column in ("max row ULP", "mean row ULP", "p99.9 ULP", "max abs", "rel L2"):
        table.add_column(column, justify="right")
    table.add_column("time", justify="right")  # the candidate's call
    table.add_column("verdict", overflow="fold")
    for r in results:
        times = " ".join(f"{name} {run.seconds:.2f}s" for name, run in r.runs.items())
        if r.error or not r.pairs:
            table.add_row(r.case.id, "-", *[""] * 5, times, _status(r.status, r.error or "no bound judged"))
        shown = [p for p in r.pairs if p.verdict.status != SKIPPED] or r.pairs
        for p in shown:
            f = p.figures
            figures = (
                (
                    f"{f.max_row_ulp:.2f}",
                    f"{f.mean_row_ulp:.3f}",
                    f"{f.p999_ulp:.1f}",
                    f"{f.max_abs:.2e}",
                    f"{f.rel_l2:.2e}",
                )
                if f
                else ("",) * 5
            )
            verdict = _status(p.verdict.status, "; ".join(p.verdict.reasons))
            if p.diagnosis:  # one line under the verdict: what `ddbench explain` makes of the failure
                verdict += "\n[dim]↳[/] " + escape(p.diagnosis.get("summary") or p.diagnosis.get("error", ""))
            run = r.runs.get(p.candidate)
            table.add_row(
                r.case.id,
                f"{p.candidate} vs {p.against}",
                *figures,
                f"{run.seconds:.2f}s" if run else "",
                verdict,
            )
    return table


def latency_table(results: Sequence[CaseResult]) -> Table:
    table = Table(title="latency", title_justify="left")
    table.add_column("case", no_wrap=True)
    table.add_column("backend", no_wrap=True)
    for column in ("median us", "IQR us", "noise", "samples"):
        table.add_column(column, justify="right")
    table.add_column("mode / stop")
    table.add_column("checks", overflow="fold")
    table.add_column("verdict")
    for r in results:
        if r.timing is None:
            continue
        checks_by_subject: dict[str, list[str]] = {}
        for c in r.timing.verdict.checks:
            checks_by_subject.setdefault(c.subject.split("/")[0], []).append(f"{c.kind}: {c.detail}")
        for name, m in r.timing.measurements.items():
            s = m.stats
            throttled = f", {sum(m.throttled)} throttled" if any(m.throttled) else ""
            table.add_row(
                r.case.id,
                name,
                f"{s.median_us:.2f}",
                f"{s.iqr_us:.2f}",
                f"{s.rel_noise:.1%}",
                str(s.samples),
                f"{m.mode} / {m.stop_reason}{throttled}",
                escape("; ".join(checks_by_subject.get(name, []))),
                "",
            )
        verdict = r.timing.verdict.status
        style = {Status.PASS: "green", Status.FAIL: "bold red"}.get(verdict, "yellow")
        table.add_row(r.case.id, "budget", "", "", "", "", "", "", f"[{style}]{verdict}[/]")
    return table
