"""Helpers shared by several commands: the calibration choice, the report's plotly mode, the strategy of the
knob options (the options themselves: autopar.cli.options)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autopar import knobs
from autopar.errors import SpecError

# The knob options named like Strategy's fields: declared in the knob registry (autopar/knobs.py).
KNOB_FLAGS = knobs.FLAG_KNOBS


def knob_strategy(flags: Mapping[str, Any], **fields: Any) -> Any:
    """The Strategy of a command's knob options, read by name from `flags` (its locals()), `fields` on top;
    --sp/--no-sp unset means on when tp > 1."""
    from autopar.specs import Strategy

    knobs = {k: flags[k] for k in KNOB_FLAGS if k in flags}
    sp = flags.get("sp")
    knobs["sp"] = (knobs.get("tp", 1) > 1) if sp is None else sp
    return Strategy(**{**knobs, **fields})


def check_plotly(mode: str, out: Path | None) -> str:
    """Validate --plotly: one of the loader modes, and only together with --out; and refuse an --out that
    can never be written (a device, a directory, a parent that is a file) before the search runs."""
    from autopar.defaults import PLOTLY_MODES
    from autopar.files import check_target

    if mode not in PLOTLY_MODES:
        raise SpecError(f"plotly={mode!r}: expected one of {', '.join(PLOTLY_MODES)}")
    if mode != "inline" and out is None:
        raise SpecError("--plotly applies to the HTML report: add --out FILE.html")
    if out is not None:
        check_target(out)
    return mode


def resolve_calibration(path: Path | None, disabled: bool) -> Any:
    """The Calibration to apply: a user file, the built-in default, or None with --no-calibration."""
    if disabled:
        if path is not None:
            raise SpecError("--calibration and --no-calibration exclude each other")
        return None
    from autopar.calibration.apply import load_calibration, load_default_calibration

    return load_calibration(path) if path is not None else load_default_calibration()


def explain_option() -> Any:
    """`--explain`: the reasoning behind each recommendation, printed after the verdict (text output only)."""
    from typing import Annotated

    import typer

    from autopar.cli.options import opt

    return opt(
        "explain",
        Annotated[
            bool,
            typer.Option(
                "--explain",
                help="Also print the reasoning behind each recommendation and the recipe comparison "
                "(text output; --json always carries it).",
            ),
        ],
        False,
    )


def check_explain(explain: bool, as_json: bool) -> None:
    """--explain shapes the text output only: with --json (which always carries the reasoning) it is an error."""
    if explain and as_json:
        raise SpecError(
            "explain: --json always carries the reasoning ('why' of each recommendation); drop --explain"
        )
