"""How a field of the problem tree (`autopar.problem`) is typed on the command line.

A tree field that a user states on the command line carries a `CliInput` in its `Annotated` metadata; the
field's `description` is the option's `--help` (and the service's schema text), its default is the option's
default. `autopar.cli.options` generates the options from these marks and `problem_of` reads them back, so an
input is declared once, in the tree: adding one is adding a field.

The mark says only what the tree cannot: the flag's spelling when it is not `--field-name`, how the command
line's text becomes the field's value (`read`), and the single-value form a one-cluster command takes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OneForm:
    """The single-value form of a list/range field, for commands that evaluate one cluster (`name:one`)."""

    help: str
    count: str = ""  # a whole count with size suffixes: what it counts (e.g. "GPU count")


@dataclass(frozen=True)
class CliInput:
    """The command-line side of one tree field (see the module docstring)."""

    flag: str = ""  # the option's declaration when not `--field-name` ("--cluster", "--x/--no-x")
    param: str = ""  # the command parameter's name when not the field's (e.g. "cluster_name")
    read: Callable[[Any], Any] | None = None  # the command line's value -> the field's value
    type: Any = None  # the option's type when not the field's (text that `read` parses)
    default: Any = None  # the option's default when not the field's own; `UNSET` = None ("not given")
    count: str = ""  # a whole count with size suffixes (autopar.units): what it counts
    decimal: bool = False  # with `count`: decimal suffixes (2k = 2,000), else binary (2K = 2,048)
    minimum: float | None = None  # the smallest value typer accepts
    show_default: bool = True
    one: OneForm | None = None


UNSET = "autopar: not given"  # CliInput.default: the option's default is None (the tree's, or the stack's, applies)


def cli_input(metadata: list[Any]) -> CliInput | None:
    """The `CliInput` mark among a field's metadata, if any."""
    return next((m for m in metadata if isinstance(m, CliInput)), None)
