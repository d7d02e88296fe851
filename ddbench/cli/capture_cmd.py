"""`ddbench capture-info FILE_OR_DIR...` and `ddbench capture info | install-hook | uninstall-hook`.

capture-info reads every file fully (checksum and layout checks included), prints what it holds, and exits
2 naming each bad file; the hook commands add or remove the .pth file that arms capture in every Python
process of this environment when DDBENCH_CAPTURE_DIR is set (docs/capture-format.md).
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from ddbench.capture.hook_file import CAPTURE_HOOK
from ddbench.cli.common import stdout
from ddbench.cli.pth_hook_cmd import add_hook_commands
from ddbench.errors import InputError


def _tree_text(trees: list[dict[str, Any]] | None) -> str:
    if not trees:
        return "not an ancestor mask (no tree recovered)"
    return "\n".join(
        f"req {i}: {t['nodes']} nodes, depth {t['depth']}, width {t['width']}, leaves {t['leaves']}"
        for i, t in enumerate(trees)
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


NOT_RECORDED = "not recorded"


def _said(value: Any) -> str:
    """Metadata a capture may leave out: what it says, or that it does not say (never "None")."""
    return NOT_RECORDED if value is None or value == "" else str(value)


def _where(s: dict[str, Any]) -> str:
    tp = "?" if s["tp_rank"] is None else s["tp_rank"]
    size = "?" if s["tp_size"] is None else s["tp_size"]
    layer = "?" if s["layer"] is None else s["layer"]
    return f"{s['model'] or 'model not recorded'}, layer {layer}, TP rank {tp} of {size}"


def _channels_text(s: dict[str, Any]) -> str:
    """Per-channel RMS of the prefix keys' latent and rope parts and of the output: median and outliers."""
    lines = []
    for name in ("latent_channels", "rope_channels", "output_channels"):
        m = s.get(name)
        if not m:
            lines.append(f"{name.split('_')[0]}: nothing finite")
            continue
        top = ", ".join(f"{v:g}" for v in (m["largest_over_median"] or []))
        lines.append(f"{name.split('_')[0]}: median RMS {m['median_rms']:.3g}, largest / median {top}")
    return "\n".join(lines)


def _tail_text(s: dict[str, Any], name: str) -> str:
    """For an over-allocated tensor, the part that means anything (a live server's buffers)."""
    tail = (s.get("tails") or {}).get(name, 0)
    return f": {s['used'][name]} used, a tail of {tail} never read" if tail else ""


def summary_table(s: dict[str, Any]) -> Table:
    table = Table(title=escape(s["file"]), title_justify="left", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    versions = s.get("versions") or {}
    rows = [
        ("call", _where(s)),
        (
            "batch",
            f"{_count(s['batch_size'], 'request')}, {s['heads']} heads/rank, {s['tokens']} draft tokens",
        ),
        ("prefix", ", ".join(map(str, s["prefix_lens"]))),
        ("q_len", ", ".join(map(str, s["q_lens"]))),
        ("trees", _tree_text(s["trees"])),
        ("sm_scale", f"{s['sm_scale']:.6f}"),
        (
            "pool",
            f"{s['pool_rows']} rows, page size {s['page_size']}, out_cache_loc {_said(s['out_cache_loc'])}",
        ),
        ("channels", _channels_text(s)),
        ("shapes", "\n".join(f"{k} {tuple(v)}{_tail_text(s, k)}" for k, v in s["shapes"].items())),
        (
            "made",
            f"{_said(s['source'])} on {_said(s['device'])} at {_said(s['created'])}"
            + (" (Triton interpreter)" if s.get("triton_interpret") else ""),
        ),
        ("versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v)),
    ]
    for field, value in rows:
        table.add_row(field, escape(str(value)))
    return table


def _info(paths: tuple[str, ...], as_json: bool) -> None:
    from ddbench.inputs.capture_file import read_capture
    from ddbench.inputs.capture_summary import capture_files, capture_summary

    summaries, bad = [], 0
    for path in capture_files(paths):
        try:
            summary = capture_summary(read_capture(path))
        except InputError as err:
            bad += 1
            click.echo(f"error: {err.message}", err=True)
            continue
        summaries.append(summary)
        if not as_json:
            stdout.print(summary_table(summary))
    if as_json:
        click.echo(json.dumps(summaries, indent=2))
    if bad:
        raise click.exceptions.Exit(2)


_FILES = click.argument("paths", nargs=-1, required=True, type=click.Path())
_JSON = click.option("--json", "as_json", is_flag=True, help="Print the summaries as JSON.")


@click.command("capture-info")
@_FILES
@_JSON
def capture_info_command(paths: tuple[str, ...], as_json: bool) -> None:
    """Shapes, trees, prefix lengths and scale of capture files (folders: every *.safetensors in them)."""
    _info(paths, as_json)


@click.group("capture")
def capture_group() -> None:
    """Captured verify-attention calls: inspect them, arm capture in SGLang servers."""


@capture_group.command("info")
@_FILES
@_JSON
def capture_info_sub(paths: tuple[str, ...], as_json: bool) -> None:
    """Same as `ddbench capture-info`."""
    _info(paths, as_json)


add_hook_commands(
    capture_group,
    lambda: CAPTURE_HOOK,
    "capture in every Python process of this environment whenever DDBENCH_CAPTURE_DIR is set.",
    "processes started with DDBENCH_CAPTURE_DIR=/some/dir now capture there",
)
