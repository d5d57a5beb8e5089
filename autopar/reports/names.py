"""Names of a search's clusters and recommendation roles that the reports and the CLI share, free of any plotting
library."""

from __future__ import annotations

from autopar.search.result import SearchResult, TrialRecord
from autopar.specs import ClusterSpec

ROLE_TITLES = {
    "fastest": "Fastest",
    "cheapest": "Cheapest",
    "most_headroom": "Most headroom",
    "balanced": "Balanced",
}


def role_title(role: str) -> str:
    """Display name of a recommendation role ('most_headroom' -> 'Most headroom')."""
    return ROLE_TITLES.get(role, role.replace("_", " ").capitalize())


def cluster_label(gpu: str, num_gpus: int) -> str:
    """'64 × H100-SXM'."""
    return f"{num_gpus} × {gpu}"


def trial_cluster(result: SearchResult, trial: TrialRecord) -> ClusterSpec:
    """The cluster a trial ran on (matched by GPU name and count; first cluster as fallback)."""
    for c in result.clusters:
        if c.gpu.name == trial.gpu and c.num_gpus == trial.num_gpus:
            return c
    for c in result.clusters:
        if c.gpu.name == trial.gpu:
            return c.model_copy(update={"num_gpus": trial.num_gpus})
    return result.clusters[0]
