"""Data types a search returns; shared by the CLI, the what-if planner and the HTML report."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from autopar.objectives import ObjectiveInfo as ObjectiveInfo
from autopar.perf.types import Estimate
from autopar.search.jsontypes import JSONDict
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class TrialRecord:
    """One evaluated strategy (feasible or not)."""

    number: int
    strategy: Strategy
    num_gpus: int
    gpu: str
    precision: str
    estimate: Estimate | None  # None when the strategy broke a rule before the model ran
    values: dict[str, float]  # objective name -> value (display units)
    feasible: bool
    reason: str = ""  # why infeasible (rule broken, OOM, constraint)
    dominated: bool = True  # False for Pareto points
    near_tie: bool = False  # dominated, but by less than the near-tie tolerance (search/pareto.py near_front)

    @property
    def shown(self) -> bool:
        """On the printed front: a feasible Pareto point or a near-tie of one."""
        return self.feasible and (not self.dominated or self.near_tie)


@dataclass
class Recommendation:
    """A recommended point with its role and a plain-language justification."""

    role: str  # "fastest", "cheapest", "most_headroom", "balanced"
    trial: TrialRecord
    why: str
    evidence: str = ""  # "No published run resembles this layout: ..." when so (search/evidence.py), else ''


@dataclass
class SearchResult:
    """What `optimize` returns: inputs, every trial, the Pareto set and the recommendations."""

    model: ModelSpec
    clusters: list[ClusterSpec]  # one, or several when GPU type/count is searched
    workload: Workload
    objectives: list[ObjectiveInfo]
    space_size: int
    trials: list[TrialRecord]
    pareto_rows: list[JSONDict]  # one row per Pareto point, best first (pareto.pareto_rows)
    recommended: list[Recommendation]
    seed: int
    budget: int
    sampler: str
    wall_s: float
    inputs: JSONDict = field(default_factory=dict)  # echo of CLI/API inputs for the report header
    notes: list[str] = field(default_factory=list)  # e.g. "cost collapses onto throughput: fixed cluster"
    calibration: JSONDict | None = None  # corrector name, version, error; None = uncalibrated
    space_valid: int | None = None  # how many of space_size pass validate_strategy (None = not counted)
    stats: JSONDict = field(default_factory=dict)  # search bookkeeping: evaluations, duplicates, HV, prices
    # search.evidence.RecipeBeside (not imported: evidence.py imports this module): the published recipe
    # for this problem, if one matches
    recipe: Any = None

    @cached_property
    def pareto(self) -> pd.DataFrame:
        """The Pareto table as a DataFrame (built on first use: the JSON path never imports pandas)."""
        import pandas as pd

        return pd.DataFrame(self.pareto_rows)

    @property
    def n_feasible(self) -> int:
        """Feasible strategies found: over the whole space for an array sweep (search/sweep.py), whose
        `trials` hold only the front and a sample."""
        sweep = self.stats.get("sweep")
        return int(sweep["feasible"]) if sweep else sum(t.feasible for t in self.trials)
