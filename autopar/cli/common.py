"""Options shared by several commands: calibration choice, the software stack, the strategy knobs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from autopar import knobs
from autopar.errors import SpecError

CalibrationOpt = Annotated[
    Path | None,
    typer.Option(
        "--calibration",
        help="Calibration model from `autopar calibrate fit` (default: the built-in model "
        "trained on the shipped published runs).",
    ),
]
NoCalibrationOpt = Annotated[
    bool, typer.Option("--no-calibration", help="Use the analytical model alone (no learned correction).")
]
FrameworkOpt = Annotated[
    str,
    typer.Option(
        "--framework",
        help="Software stack: megatron, megatron-legacy, torchtitan, fsdp or deepspeed "
        "(sets kernel fusion, attention kernel, recompute semantics).",
    ),
]

TpOverlapOpt = Annotated[
    bool | None,
    typer.Option(
        "--tp-comm-overlap/--no-tp-comm-overlap",
        help="Overlap TP collectives with GEMMs (Megatron --tp-comm-overlap, torchtitan async "
        "TP); needs sequence parallelism. Default: on for megatron, as its published recipes run it; "
        "off for the other stacks.",
        show_default=False,
    ),
]

PlotlyOpt = Annotated[
    str,
    typer.Option(
        "--plotly",
        help="How the --out report loads plotly.js: inline (self-contained, a compressed partial "
        "bundle, ~0.6 MB) or cdn (smaller file, needs network).",
    ),
]

# Stacks and the knob options named like Strategy's fields: declared in the knob registry (autopar/knobs.py).
FRAMEWORKS = knobs.FRAMEWORKS
KNOB_FLAGS = knobs.FLAG_KNOBS


def knob_strategy(flags: Mapping[str, Any], **fields: Any) -> Any:
    """The Strategy of a command's knob options, read by name from `flags` (its locals()), `fields` on top;
    --sp/--no-sp unset means on when tp > 1."""
    from autopar.specs import Strategy

    knobs = {k: flags[k] for k in KNOB_FLAGS if k in flags}
    sp = flags.get("sp")
    knobs["sp"] = (knobs.get("tp", 1) > 1) if sp is None else sp
    return Strategy(**{**knobs, **fields})


MemorySaversOpt = Annotated[
    str,
    typer.Option(
        "--memory-savers",
        help="Memory savers the search may choose, comma list of offload (CPU optimizer offload), "
        "bf16_states, 8bit_states (optimizer-state precision), act_offload (activation CPU offload, "
        "Megatron, pp=1); only those the --framework ships are offered; empty = none.",
    ),
]


def parse_memory_savers(value: str) -> tuple[str, ...]:
    """Validate --memory-savers (one-line error naming the allowed values)."""
    from autopar.layouts import MEMORY_SAVERS

    names = tuple(dict.fromkeys(x.strip() for x in value.split(",") if x.strip()))
    bad = [x for x in names if x not in MEMORY_SAVERS]
    if bad:
        raise SpecError(f"memory_savers={bad[0]!r}: expected a comma list of {', '.join(MEMORY_SAVERS)}")
    return names


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


def check_framework(name: str) -> str:
    """Validate a --framework value (one-line error naming the allowed values)."""
    if name not in FRAMEWORKS:
        raise SpecError(f"framework={name!r}: expected one of {', '.join(FRAMEWORKS)}")
    return name


def resolve_calibration(path: Path | None, disabled: bool) -> Any:
    """The Calibration to apply: a user file, the built-in default, or None with --no-calibration."""
    if disabled:
        if path is not None:
            raise SpecError("--calibration and --no-calibration exclude each other")
        return None
    from autopar.calibration.apply import load_calibration, load_default_calibration

    return load_calibration(path) if path is not None else load_default_calibration()
