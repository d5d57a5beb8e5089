"""Test-session set-up shared by every test module.

typer rebuilds autopar's whole click command tree from the annotated command functions on every
`app(...)` and `CliRunner().invoke(app, ...)` (typer 0.29: `typer.main.get_command`), ~0.16 s for the
~25 commands: three quarters of a small in-process command's time, and the tests make hundreds of such
calls (the fuzz tests one per example). The tree depends only on what is registered on the app, so it
is built once per registration state here; every invocation still parses, validates and runs exactly
as the console script does. Subprocess tests (tests/test_startup.py, the console-script tests) run the
real entry point unmemoised.
"""

from __future__ import annotations

from typing import Any

import typer.main
import typer.testing

_build_command = typer.main.get_command
_commands: dict[tuple[int, ...], Any] = {}


def _registrations(app: typer.Typer) -> tuple[int, ...]:
    """What the built tree depends on: the app and each (sub-)app's registered commands and groups."""
    key = [id(app), len(app.registered_commands), len(app.registered_groups), id(app.registered_callback)]
    for group in app.registered_groups:
        if group.typer_instance is not None:
            key += _registrations(group.typer_instance)
    return tuple(key)


def _memoised_get_command(app: typer.Typer) -> Any:
    key = _registrations(app)
    if key not in _commands:
        _commands[key] = _build_command(app)
    return _commands[key]


typer.main.get_command = _memoised_get_command  # used by Typer.__call__ (autopar.cli.main)
typer.testing._get_command = _memoised_get_command  # used by typer.testing.CliRunner.invoke
