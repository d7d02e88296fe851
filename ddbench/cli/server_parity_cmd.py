"""`ddbench server-parity MODEL`: a real SGLang server twice, Triton then the kernel; the same greedy text."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.markup import escape

from ddbench.atomic import check_writable_folder, write_atomic
from ddbench.bounded_read import read_regular_file
from ddbench.cli.common import FiniteFloatRange, stdout
from ddbench.errors import InputError

MAX_PROMPTS_BYTES = 4 << 20


def read_prompts(path: str) -> tuple[str, ...]:
    """A JSON list of strings, or a text file with one prompt a line."""
    text = read_regular_file(
        path, what="prompts file", max_bytes=MAX_PROMPTS_BYTES, raise_with="split it into smaller files"
    ).decode(errors="replace")
    if text.lstrip().startswith("["):
        try:
            prompts = json.loads(text)
        except ValueError as err:
            raise InputError(f"not valid JSON: {err}", file=path) from None
        bad = next((i for i, p in enumerate(prompts) if not isinstance(p, str) or not p.strip()), None)
        if bad is not None:
            raise InputError(f"[{bad}]: a prompt must be a non-empty string", file=path)
        return tuple(prompts)
    prompts = tuple(line for line in text.splitlines() if line.strip())
    if not prompts:
        raise InputError("no prompt in it", file=path)
    return prompts


@click.command("server-parity")
@click.argument("model_path", type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=Path("results/server-parity"),
    show_default=True,
    help="Folder of the report (report.json, report.md), server logs, plugin logs.",
)
@click.option(
    "--speculative-algorithm",
    "algorithm",
    default="NGRAM",
    show_default=True,
    help="NGRAM (no draft model), or EAGLE / EAGLE3 / NEXTN with --draft-model.",
)
@click.option("--draft-model", type=click.Path(path_type=Path), help="Local folder of the draft weights.")
@click.option(
    "--num-draft-tokens", type=int, help="Draft tokens a verify step takes (SGLang's default if unset)."
)
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--prompts", "prompts_file", type=click.Path(), help="A JSON list of strings or one prompt a line."
)
@click.option("--new-tokens", type=click.IntRange(min=1), default=128, show_default=True)
@click.option(
    "--tie-margin",
    type=FiniteFloatRange(min=0.0),
    default=0.05,
    show_default=True,
    help="tau: a divergence passes where both top-2 log-probability margins are below it.",
)
@click.option(
    "--min-accept-length",
    type=FiniteFloatRange(min=1.0),
    default=1.2,
    show_default=True,
    help="Completion tokens per verify step each server must reach (speculation really ran).",
)
@click.option("--mode", type=click.Choice(["apply", "apply+shadow"]), default="apply", show_default=True)
@click.option("--candidate", default="cuda", show_default=True, help="The kernel the plugin serves.")
@click.option("--no-cuda-graph", is_flag=True, help="Both servers eager (--disable-cuda-graph).")
@click.option("--no-deterministic", is_flag=True, help="Without --enable-deterministic-inference.")
@click.option(
    "--server-arg",
    "server_args",
    multiple=True,
    help="One more argument for both servers, e.g. --server-arg=--mem-fraction-static=0.8.",
)
@click.option(
    "--ready-timeout",
    type=FiniteFloatRange(min=1.0),
    default=1800.0,
    show_default=True,
    help="Seconds a server may take to load.",
)
@click.option("--generate-timeout", type=FiniteFloatRange(min=1.0), default=900.0, show_default=True)
def server_parity_command(model_path: Path, out_dir: Path, algorithm: str, draft_model: Path | None,
                          num_draft_tokens: int | None, tp: int, prompts_file: str | None, new_tokens: int,
                          tie_margin: float, min_accept_length: float, mode: str, candidate: str,
                          no_cuda_graph: bool, no_deterministic: bool, server_args: tuple[str, ...],
                          ready_timeout: float, generate_timeout: float) -> None:  # fmt: skip
    """Start SGLang twice on MODEL_PATH (a local folder) with speculation on: Triton, then ddbench's plugin
    serving the kernel. The same temperature-0 prompts must give the same tokens (tie-aware), the kernel
    must have served, and speculation must have accepted drafts.

    Exit 0 pass, 1 fail or a server error, 2 bad input, 3 this machine cannot run a server (said why)."""
    from ddbench.report.server_parity_markdown import server_parity_markdown
    from ddbench.runner.server_parity import DEFAULT_PROMPTS, ServerParityRequest, run_server_parity

    check_writable_folder(out_dir, "--out")
    request = ServerParityRequest(
        model_path=model_path,
        out_dir=out_dir,
        algorithm=algorithm.upper(),
        draft_model_path=draft_model,
        num_draft_tokens=num_draft_tokens,
        tp=tp,
        prompts=read_prompts(prompts_file) if prompts_file else DEFAULT_PROMPTS,
        new_tokens=new_tokens,
        tie_margin=tie_margin,
        min_accept_length=min_accept_length,
        mode=mode,
        candidate=candidate,
        cuda_graphs=not no_cuda_graph,
        deterministic=not no_deterministic,
        server_args=server_args,
        ready_timeout_s=ready_timeout,
        generate_timeout_s=generate_timeout,
    )
    report = run_server_parity(request, say=lambda line: stdout.print(escape(line), highlight=False))
    markdown = server_parity_markdown(report)
    write_atomic(out_dir / "report.md", markdown + "\n")
    stdout.print(markdown, highlight=False, markup=False)
    stdout.print(f"report: {escape(str(out_dir / 'report.json'))}", highlight=False)
    if report.exit_code:
        raise SystemExit(report.exit_code)
