"""Strategy labels read back: `parse_strategy_label` inverts `Strategy.label()` ('TP4+SP PP2v2 DP8/Z1 mb1 sel-AC').

The tokens are declared once in the knob registry (autopar/knobs.py LABEL_TOKENS), which writes them too.
Used by `autopar launch --strategy`, `autopar fix` and evaluation files; needs only the specs.
"""

from __future__ import annotations

from autopar.errors import SpecError
from autopar.knobs import parse_label
from autopar.specs import Strategy


def parse_strategy_label(label: str) -> Strategy:
    """Parse a `Strategy.label()` string ('TP4+SP PP2v2 DP8/Z1 mb1 sel-AC') back into a Strategy."""
    try:
        fields = parse_label(label)
    except ValueError as e:
        raise SpecError(str(e)) from None
    return Strategy(**fields)
