"""Search counts shown by the CLI summary, its --json and the report header (no plotly import)."""

from __future__ import annotations

from autopar.search.result import SearchResult


def search_counts(result: SearchResult) -> dict[str, int]:
    """The counts every output shows (CLI summary, --json, report header), from one place: total trials =
    evaluated (strategies with an estimate: COMPLETE in a stored study) + rule violations (invalid layouts,
    PRUNED with their reason, no values); feasible; on the Pareto front; near-ties of it (search/pareto.py
    near_front: shown beside the front, not on it)."""
    ties = sum(bool(r.get("near_tie")) for r in result.pareto_rows)
    return {**_counts(result), "pareto": len(result.pareto_rows) - ties, "near_ties": ties}


def _counts(result: SearchResult) -> dict[str, int]:
    sweep = result.stats.get("sweep")
    if sweep:  # an array sweep (search/sweep.py): totals over the space; trials = front + a sample
        n = sweep["evaluated"]
        return {
            "total": n,
            "evaluated": n,
            "feasible": int(result.n_feasible),
            "rule_violations": 0,
        }
    evaluated = sum(t.estimate is not None for t in result.trials)
    return {
        "total": len(result.trials),
        "evaluated": evaluated,
        "feasible": int(result.n_feasible),
        "rule_violations": len(result.trials) - evaluated,
    }
