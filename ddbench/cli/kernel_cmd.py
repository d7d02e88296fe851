"""`ddbench kernel-check`: build the kernels for sm_120 and sm_90 and check their resources and SASS."""

from __future__ import annotations

import click

from ddbench.atomic import write_json_atomic
from ddbench.cli.common import stdout
from ddbench.errors import BackendUnavailable
from ddbench.kernel.kernel_check import ARCHS, kernel_check
from ddbench.kernel.resources import REGISTER_LIMIT, SMEM_LIMIT_BYTES


@click.command("kernel-check")
@click.option("--arch", "archs", multiple=True, help=f"Architectures (default: {', '.join(ARCHS)}).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the report as JSON.")
def kernel_check_command(archs: tuple[str, ...], json_path: str | None) -> None:
    """Compile the verify kernels with nvcc and check spills, registers, shared memory and SASS."""
    try:
        reports = kernel_check(archs or ARCHS)
    except RuntimeError as err:
        raise BackendUnavailable(f"kernel-check: unavailable: {err}") from None
    for r in reports:
        for k in r.kernels:
            stdout.print(
                f"{r.arch} {k.short_name}: {k.registers} registers (limit {REGISTER_LIMIT}), "
                f"{k.spill_store_bytes}/{k.spill_load_bytes} B spilled, {k.stack_bytes} B stack, "
                f"{k.static_smem_bytes} B static smem (limit {SMEM_LIMIT_BYTES} with dynamic)",
                highlight=False,
            )
        if r.sass is not None:
            stdout.print(
                f"{r.arch} SASS: {r.sass.count('HMMA')} HMMA, {r.sass.count('LDSM')} LDSM, "
                f"{r.sass.count('LDGSTS')} LDGSTS, forbidden: {r.sass.forbidden or 'none'}",
                highlight=False,
            )
        else:
            stdout.print(f"{r.arch} SASS: unavailable: {r.sass_unavailable}", highlight=False)
        if r.sass_map_unavailable:
            stdout.print(f"{r.arch} SASS map: unavailable: {r.sass_map_unavailable}", highlight=False)
        for name, kernel in (r.sass_map or {}).items():  # what the model's issue term counts from
            anchors = sum(len(b.anchors) for b in kernel.blocks)
            stdout.print(
                f"{r.arch} SASS map of {name}: {len(kernel.blocks)} blocks, {kernel.instructions} "
                f"instructions, {anchors} anchored to the emulation's call sites",
                highlight=False,
            )
        for problem in r.problems:
            stdout.print(f"[bold red]{r.arch} FAIL[/] {problem}")
    if json_path:
        write_json_atomic(json_path, [r.to_json() for r in reports])
    if not all(r.ok for r in reports):
        raise click.exceptions.Exit(1)
    stdout.print("kernel-check: ok")
