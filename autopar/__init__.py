"""autopar: how to parallelize LLM training on the GPUs you have (or are about to buy).

The public API. Heavy modules (plotly, scikit-learn) load lazily on first use, so importing
autopar and running the search stays fast.
"""

from __future__ import annotations

from autopar.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    # specs and errors
    "ModelSpec": "autopar.specs",
    "GPUSpec": "autopar.specs",
    "ClusterSpec": "autopar.specs",
    "Workload": "autopar.specs",
    "Strategy": "autopar.specs",
    "AutoparError": "autopar.errors",
    "InvalidStrategyError": "autopar.errors",
    "UnknownNameError": "autopar.errors",
    # catalogs
    "get_model": "autopar.catalog",
    "get_gpu": "autopar.catalog",
    "list_models": "autopar.catalog",
    "list_gpus": "autopar.catalog",
    "model_from_hf_config": "autopar.catalog",
    # the analytical model
    "estimate": "autopar.perf",
    "validate_strategy": "autopar.perf",
    "count_params": "autopar.perf",
    "Estimate": "autopar.perf",
    # the problem config tree (model + cluster + workload + search settings)
    "Problem": "autopar.problem",
    "ClusterConfig": "autopar.problem",
    "WorkloadConfig": "autopar.problem",
    "SearchSettings": "autopar.problem",
    "WhatIfSettings": "autopar.costs.whatif_types",
    # search
    "optimize": "autopar.search",
    "SearchResult": "autopar.search.result",
    # costs
    "cost_figures": "autopar.costs",
    "default_price_book": "autopar.costs",
    "load_price_book": "autopar.costs",
    "run_whatif": "autopar.costs.whatif",
    # reports
    "write_search_report": "autopar.reports",
    "write_whatif_report": "autopar.reports",
    # launch
    "launch_settings": "autopar.launch",
    # run records and calibration
    "read_run_records": "autopar.calibration.ingest.tables",
    "batch_estimate": "autopar.calibration.records.estimate",
    "load_default_calibration": "autopar.calibration.apply",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY, extra=["__version__"])
