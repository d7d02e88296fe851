"""`install-hook` and `uninstall-hook` for a .pth hook (capture's, the serving plugin's): one pair of
commands, added to each group with its hook and what arming it means."""

from __future__ import annotations

from collections.abc import Callable

import click

from ddbench.capture.hook_file import PthHook
from ddbench.errors import InputError


def add_hook_commands(group: click.Group, hook: Callable[[], PthHook], arms: str, armed: str) -> None:
    """`arms`: the install command's help after "Arm …"; `armed`: what install says the hook now does."""
    site_dir = click.option(
        "--site-dir",
        type=click.Path(file_okay=False),
        help="Where the .pth file goes (default: this environment's site-packages).",
    )

    @group.command("install-hook", help=f"Arm {arms}")
    @site_dir
    def install_hook_command(site_dir: str | None) -> None:
        from ddbench.capture.hook_file import install_hook

        try:
            path = install_hook(site_dir, hook())
        except OSError as err:
            raise InputError(f"cannot write the hook: {err.strerror or err}", file=site_dir) from None
        click.echo(f"installed {path}; {armed}")

    @group.command("uninstall-hook")
    @site_dir
    def uninstall_hook_command(site_dir: str | None) -> None:
        """Remove the .pth file written by install-hook."""
        from ddbench.capture.hook_file import uninstall_hook

        try:
            path = uninstall_hook(site_dir, hook())
        except OSError as err:
            raise InputError(f"cannot remove the hook: {err.strerror or err}", file=site_dir) from None
        click.echo(f"removed {path}" if path else "no hook installed there")
