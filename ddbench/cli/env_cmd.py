"""`ddbench env`: device, versions, and which backends can run here (and why not)."""

from __future__ import annotations

import json

import click

from ddbench.backends import get_backend, known_backend_names
from ddbench.cli.common import stdout
from ddbench.environment import environment
from ddbench.errors import DdbenchError


def backend_availability() -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for name in known_backend_names():
        try:
            status = get_backend(name).availability()
            out[name] = {"available": status.ok, "detail": status.detail}
        except DdbenchError as err:
            out[name] = {"available": False, "detail": err.message}
    return out


@click.command("env")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def env_command(as_json: bool) -> None:
    """Describe this machine and the backends available on it."""
    facts = environment()
    facts["backends"] = backend_availability()
    if as_json:
        click.echo(json.dumps(facts, indent=2))
        return
    device = facts["device"]
    stdout.print(
        f"device: {device['name']} ({device['kind']}"
        + (f", {device['capability']}" if device.get("capability") else "")
        + ")",
        highlight=False,
    )
    stdout.print(f"python {facts['python']} on {facts['platform']}", highlight=False)
    for name, ver in facts["packages"].items():
        stdout.print(f"  {name}: {ver or 'not installed'}", highlight=False)
    stdout.print("backends:")
    for name, status in facts["backends"].items():
        mark = "available" if status["available"] else "unavailable"
        stdout.print(f"  {name}: {mark}: {status['detail']}", highlight=False)
