"""The `ddbench` command: a click group whose errors become a message and an exit code, never a traceback.

Exit codes: 0 all judged pairs pass, 1 a parity failure (or a backend error), 2 bad input or usage,
3 a requested backend unavailable.
"""

from __future__ import annotations

import sys

import click

from ddbench.backends.interpreter_fix import use_interpreter_without_gpu
from ddbench.cli.apply_cmd import apply_group
from ddbench.cli.baseline_cmd import baseline_group
from ddbench.cli.capture_cmd import capture_group, capture_info_command
from ddbench.cli.env_cmd import env_command
from ddbench.cli.explain_cmd import explain_command
from ddbench.cli.kernel_cmd import kernel_check_command
from ddbench.cli.list_cmd import list_command
from ddbench.cli.merge_cmd import merge_command
from ddbench.cli.profile_cmd import profile_command
from ddbench.cli.report_cmd import report_command
from ddbench.cli.run_cmd import run_command
from ddbench.cli.selftest_cmd import selftest_command
from ddbench.cli.server_parity_cmd import server_parity_command
from ddbench.cli.validate_cmd import validate_command
from ddbench.errors import DdbenchError

EXIT_INTERRUPTED = 130


class _Group(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except DdbenchError as err:
            click.echo(
                f"error: {err.message}" if "\n" not in err.message else "error:\n" + err.message, err=True
            )
            ctx.exit(err.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ddbench")
def cli() -> None:
    """Parity and latency suites for the verify attention kernel of tree speculative decoding."""


cli.add_command(validate_command)
cli.add_command(list_command)
cli.add_command(run_command)
cli.add_command(env_command)
cli.add_command(baseline_group)
cli.add_command(kernel_check_command)
cli.add_command(report_command)
cli.add_command(merge_command)
cli.add_command(capture_info_command)
cli.add_command(capture_group)
cli.add_command(explain_command)
cli.add_command(selftest_command)
cli.add_command(profile_command)
cli.add_command(apply_group)
cli.add_command(server_parity_command)


def main() -> None:
    use_interpreter_without_gpu()
    sys.exit(cli.main(prog_name="ddbench", standalone_mode=True))
