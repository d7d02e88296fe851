"""`ddbench apply build | report | install-hook | uninstall-hook`: the serving plugin's commands.

The plugin itself runs inside SGLang (docs/serving.md); these prepare a machine for it and read what it
logged.
"""

from __future__ import annotations

import json

import click
from rich.markup import escape
from rich.table import Table

from ddbench.atomic import write_atomic
from ddbench.capture.hook_file import PthHook
from ddbench.cli.common import stdout
from ddbench.cli.pth_hook_cmd import add_hook_commands
from ddbench.errors import BackendUnavailable, InputError


@click.group("apply")
def apply_group() -> None:
    """Serve the custom kernel in SGLang with a live check against Triton (docs/serving.md)."""


@apply_group.command("build")
def build_command() -> None:
    """Build the kernel for this machine's GPU before serving (the server's TP ranks only load it)."""
    import torch

    if not torch.cuda.is_available():
        raise BackendUnavailable("unavailable: no CUDA GPU here (torch.cuda.is_available() is False)")
    from ddbench.kernel.build import nvcc_available
    from ddbench.kernel.cuda_build import built_extension, load_cuda_extension

    if (reason := nvcc_available()) is not None:
        raise BackendUnavailable(f"cannot build the kernel: {reason}")
    load_cuda_extension()
    click.echo(f"built {built_extension()} for {torch.cuda.get_device_name()}; servers here load it")


def _worst(summary_worst: dict, name: str) -> str:
    value = summary_worst.get(name)
    return "-" if value is None else f"{value:.3g}"


def _state(s) -> str:  # type: ignore[no-untyped-def]
    if s.unavailable:
        return "candidate unavailable"
    if s.tripped:
        return "TRIPPED: Triton serves"
    return "ok"


@apply_group.command("report")
@click.argument("logs", nargs=-1, required=True, type=click.Path())
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the summaries as JSON.")
def report_command(logs: tuple[str, ...], json_path: str | None) -> None:
    """Summarise the plugin's logs of every rank (files, or folders of apply-*.jsonl) as a table.

    Exit 1 when any process breached, 0 otherwise."""
    from ddbench.report.apply_logs import read_apply_logs

    summaries = read_apply_logs(list(logs))
    table = Table(title="ddbench apply: target-verify calls by process")
    for column in (
        "rank",
        "pid",
        "mode",
        "candidate",
        "seen",
        "eligible",
        "candidate served",
        "Triton served",
        "compared",
        "uncompared (graph)",
        "worst max_row_ulp",
        "worst mean_row_ulp",
        "breaches",
        "fallbacks",
        "state",
    ):
        table.add_column(column)
    for s in summaries:
        worst = s.counters.get("worst") or {}
        table.add_row(
            "?" if s.rank is None else str(s.rank),
            str(s.pid),
            s.mode,
            escape(s.backend),
            str(s.count("seen")),
            str(s.count("eligible")),
            str(s.count("served_candidate")),
            str(s.count("served_triton")),
            str(s.count("compared")),
            str(s.count("uncompared_graph")),
            _worst(worst, "max_row_ulp"),
            _worst(worst, "mean_row_ulp"),
            str(len(s.breaches) or s.count("breaches")),
            str(s.count("fallbacks")),
            _state(s),
        )
    stdout.print(table)
    for s in summaries:
        where = f"rank {'?' if s.rank is None else s.rank} (pid {s.pid})"
        for breach in s.breaches:
            reasons = "; ".join(breach.get("reasons") or [])
            stdout.print(
                f"BREACH {where}, layer {breach.get('layer')}, eligible call {breach.get('call_index')}: "
                f"{escape(reasons)}\n  capture: {escape(str(breach.get('capture')))}"
            )
        if s.unavailable:
            stdout.print(f"{where}: candidate {escape(s.unavailable)}")
        for name in ("ineligible", "fallbacks"):
            for reason, n in (s.counters.get(name) or {}).items():
                stdout.print(f"{where}: {n} {name}: {escape(reason)}")
        if s.cut_last_line:
            stdout.print(
                f"{escape(s.file)}: the last line was cut short (the process ended mid-write); skipped"
            )
        if not s.counters:
            stdout.print(
                f"{escape(s.file)}: no counters line yet (written every minute, at breaches, at exit)"
            )
    if json_path:
        try:
            write_atomic(json_path, json.dumps([s.to_json() for s in summaries], indent=2) + "\n")
        except OSError as err:
            raise InputError(f"cannot write: {err.strerror or err}", file=json_path) from None
    if any(s.tripped for s in summaries):
        raise SystemExit(1)


def _apply_hook() -> PthHook:
    from ddbench.serving.plugin import PTH_HOOK

    return PTH_HOOK


add_hook_commands(
    apply_group,
    _apply_hook,
    "the plugin in every Python process of this environment whenever DDBENCH_APPLY is not off: for SGLang "
    "versions without plugins (with plugins, SGLANG_PLUGINS=ddbench is enough).",
    "processes started with DDBENCH_APPLY=shadow (or apply) now arm the plugin",
)
