"""Costs: the price book (kept in autopar.catalog, re-exported here), $/hour, $/Mtoken, time and cost to train, and procurement what-ifs."""

from autopar.catalog.pricefile import default_price_book, load_price_book
from autopar.catalog.prices import (
    TIERS,
    OwnedCost,
    PriceBook,
    PriceEntry,
    Quote,
    ResolvedPrice,
    normalize_tier,
    resolve_price,
)
from autopar.costs.figures import (
    CostFigures,
    cost_figures,
    format_duration,
    format_tokens,
    format_usd,
    parse_duration,
    parse_tokens,
)
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
    "ResolvedPrice",
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
    "resolve_price",
    "run_whatif",
]
