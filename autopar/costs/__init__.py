"""Costs: the price book (kept in autopar.catalog, re-exported here), $/hour, $/Mtoken, time and cost to train, and procurement what-ifs."""

from __future__ import annotations

from autopar.lazy import lazy_exports

# Public name -> module; loaded on first access (PEP 562) so that autopar.costs.figures does not pull
# in the what-if machinery (search, analytical model).
_LAZY: dict[str, str] = {
    "default_price_book": "autopar.catalog.pricefile",
    "load_price_book": "autopar.catalog.pricefile",
    "TIERS": "autopar.catalog.prices",
    "OwnedCost": "autopar.catalog.prices",
    "PriceBook": "autopar.catalog.prices",
    "PriceEntry": "autopar.catalog.prices",
    "Quote": "autopar.catalog.prices",
    "ResolvedPrice": "autopar.catalog.prices",
    "normalize_tier": "autopar.catalog.prices",
    "resolve_price": "autopar.catalog.prices",
    "CostFigures": "autopar.costs.figures",
    "cost_figures": "autopar.costs.figures",
    "format_duration": "autopar.costs.figures",
    "format_tokens": "autopar.costs.figures",
    "format_usd": "autopar.costs.figures",
    "parse_duration": "autopar.costs.figures",
    "parse_tokens": "autopar.costs.figures",
    "HardwareOption": "autopar.costs.whatif",
    "OptionResult": "autopar.costs.whatif",
    "SensitivityRow": "autopar.costs.whatif",
    "WhatIfResult": "autopar.costs.whatif",
    "run_whatif": "autopar.costs.whatif",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY)
