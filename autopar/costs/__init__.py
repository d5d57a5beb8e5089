"""Costs: the price book, $/hour, $/Mtoken, time and cost to train, and procurement what-ifs."""

from autopar.costs.figures import (
    CostFigures,
    cost_figures,
    format_duration,
    format_tokens,
    format_usd,
    parse_duration,
    parse_tokens,
)
from autopar.costs.pricebook import (
    TIERS,
    OwnedCost,
    PriceBook,
    PriceEntry,
    Quote,
    normalize_tier,
)
from autopar.costs.pricefile import default_price_book, load_price_book
from autopar.costs.whatif import HardwareOption, OptionResult, SensitivityRow, WhatIfResult, run_whatif

__all__ = [
    "TIERS",
    "CostFigures",
    "HardwareOption",
    "OptionResult",
    "OwnedCost",
    "PriceBook",
    "PriceEntry",
    "Quote",
    "SensitivityRow",
    "WhatIfResult",
    "cost_figures",
    "default_price_book",
    "format_duration",
    "format_tokens",
    "format_usd",
    "load_price_book",
    "normalize_tier",
    "parse_duration",
    "parse_tokens",
    "run_whatif",
]
