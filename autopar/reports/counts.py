"""Search counts shown by the CLI summary, its --json and the report header (no plotly import)."""

from __future__ import annotations

from autopar.search.result import SearchResult


def search_counts(result: SearchResult) -> dict[str, int]:
    """The counts every output shows (CLI summary, --json, report header), from one place:
    evaluated = distinct strategies the search evaluated (its budget; Optuna trials that repeat a
    strategy or break a layout rule are not counted), feasible, on the Pareto front, rule violations."""
    records = sum(t.estimate is not None for t in result.trials)
    return {
        "evaluated": int(result.stats.get("evaluated", records)),
        "feasible": int(result.n_feasible),
        "pareto": len(result.pareto),
        "rule_violations": sum(t.estimate is None for t in result.trials),
    }
