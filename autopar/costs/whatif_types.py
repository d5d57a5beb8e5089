"""Result types of a procurement what-if: per-option outcome, sensitivity rows, the whole result.

Produced by `autopar.costs.whatif.run_whatif`, rendered by `autopar.reports.write_whatif_report` and
serialised by `autopar whatif --json`; their fields are a stable interface (add, never rename or remove).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from autopar.costs.bands import FigureBand, Tie, band_doc
from autopar.costs.figures import CostFigures
from autopar.defaults import (
    DEFAULT_MIN_HEADROOM_GIB,
    DEFAULT_SAMPLER,
    DEFAULT_SEED,
    DEFAULT_TIER,
    DEFAULT_WHATIF_BUDGET,
)
from autopar.perf.types import Estimate
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Transport, Workload
from autopar.units import SECONDS_PER_DAY


class WhatIfSettings(BaseModel):
    """How a what-if runs (the what-if branch of the problem config tree, autopar/problem.py): the money and
    time questions, and the search run on each hardware option."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token_budget: float | str | None = Field(
        default=None, description="tokens to train (default: workload's)"
    )
    tier: str = Field(default=DEFAULT_TIER, description="price tier")
    goodput: float = Field(default=1.0, description="fraction of wall-clock time making progress")
    deadline_s: float | None = Field(default=None, description="wall-clock deadline (s)")
    max_cost_usd: float | None = Field(default=None, description="spending cap (USD)")
    budget: int = Field(default=DEFAULT_WHATIF_BUDGET, description="search trials per option")
    seed: int = Field(default=DEFAULT_SEED, description="random seed")
    min_headroom_gib: float = Field(default=DEFAULT_MIN_HEADROOM_GIB, description="free GiB a fit leaves")
    precisions: list[str] | None = Field(default=None, description="precisions searched")
    sampler: str = Field(default=DEFAULT_SAMPLER, description="search method per option")
    timeout: float | None = Field(default=None, description="per-option search timeout (s)")
    gpus_per_node: int | None = Field(default=None, description="GPUs per host [default: the GPU's]")
    internode_bw: float | None = Field(default=None, description="NIC bytes/s per GPU per direction")
    nvlink_domain: int | None = Field(default=None, description="GPUs sharing one NVLink fabric")
    transport: Transport | None = Field(
        default=None, description="scale-out NIC transport (specs.TRANSPORTS) [default: infiniband]"
    )
    sensitivity: bool = Field(default=True, description="run the sensitivity analysis")
    prices_file: str | None = Field(default=None, description="the price file the book was read from")
    storage: str | None = Field(default=None, description="one stored study per option here")
    study_name: str | None = Field(default=None, description="prefix of the per-option study names")
    batch_tokens_per_gpu: float | None = Field(default=None, description="global batch grows with the count")


@dataclass
class OptionResult:
    """The outcome for one hardware option: chosen strategy, speed, money, time, rank.

    Fields that need a feasible strategy (strategy, estimate, tokens_per_s, mfu, headroom_gib,
    figures) are None when the search found nothing that fits; `reason` then says why.
    """

    label: str  # "H100-SXM:512"
    gpu: str  # canonical GPU name
    count: int  # GPUs
    tier: str  # price tier used, e.g. "on_demand"
    usd_per_gpu_hour: float  # price used
    price_source: str  # where the price came from (price book entry or user file)
    feasible: bool  # a strategy that fits was found
    strategy: Strategy | None = None  # recommended strategy (max tokens/s among fitting ones)
    strategy_label: str = ""  # Strategy.label(), e.g. "TP8+SP PP4 DP16/Z1 mb1"
    precision: str = ""  # GEMM precision of the chosen trial (bf16/fp8)
    estimate: Estimate | None = None  # estimate of the chosen strategy (calibrated when a corrector ran)
    tokens_per_s: float | None = None  # cluster tokens/s used for the figures (calibrated if a corrector ran)
    mfu: float | None = None  # model FLOPs utilisation of the chosen strategy (0..1)
    headroom_gib: float | None = None  # free memory per GPU at peak, GiB
    figures: CostFigures | None = None  # $/h, $/Mtoken, time and cost to train, GPU-hours
    meets_deadline: bool | None = None  # None when no deadline was given (or infeasible)
    within_cost_cap: bool | None = None  # None when no --max-cost was given (or infeasible)
    rank: int | None = None  # 1 = best; None when infeasible
    on_pareto: bool = False  # on the cost-vs-time Pareto front across options
    n_trials: int = 0  # strategies evaluated by the search for this option
    n_feasible: int = 0  # of which fit and broke no rule
    search_wall_s: float = 0.0  # search time for this option
    reason: str = ""  # why infeasible, or other caveat
    search: Any = None  # the SearchResult (kept for the report; not serialised)
    cluster: ClusterSpec | None = None  # the cluster searched (its price is usd_per_gpu_hour, not set on it)
    # Kind of price: "built-in price book", "catalog default", "price file PATH", "override", "assumed", ...
    price_provenance: str = ""
    price_borrowed_from: str = ""  # the GPU whose price this is when another GPU's was used ("" = its own)
    global_batch: int | None = None  # sequences per step at this option (--batch-tokens-per-gpu scales it)
    band: FigureBand | None = None  # each figure at the ends of the model's 80% band (None: uncalibrated)
    evidence: Any = None  # costs.evidence.OptionEvidence: the measured runs behind the figures
    verify: tuple[str, ...] = ()  # why the chosen layout is not recipe-style (costs/recipe_style.py)
    ties: list[str] = field(default_factory=list)  # "cost"/"time": tied with the best within the bands

    @property
    def price_label(self) -> str:
        """'$6.00/GPU-h' and, for a price borrowed from another GPU, ' (B200's price)'."""
        own = f"${self.usd_per_gpu_hour:.2f}/GPU-h"
        return own + (f" ({self.price_borrowed_from}'s price)" if self.price_borrowed_from else "")

    @property
    def time_to_train_s(self) -> float | None:
        """Wall-clock seconds to train the token budget (goodput applied)."""
        return self.figures.time_to_train_s if self.figures else None

    @property
    def total_cost_usd(self) -> float | None:
        """USD to train the token budget (goodput applied)."""
        return self.figures.total_cost_usd if self.figures else None

    @property
    def usd_per_mtoken(self) -> float | None:
        """USD per million trained tokens (goodput applied)."""
        return self.figures.usd_per_mtoken if self.figures else None

    @property
    def usd_per_hour(self) -> float | None:
        """Cluster USD per wall-clock hour."""
        return self.figures.usd_per_hour if self.figures else None

    @property
    def gpu_hours(self) -> float | None:
        """GPU-hours to train the token budget."""
        return self.figures.gpu_hours if self.figures else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the `options` entries of `autopar whatif --json`): each banded figure has its
        `_low`/`_high` beside it (costs/bands.py)."""
        doc = {
            "label": self.label,
            "gpu": self.gpu,
            "count": self.count,
            "tier": self.tier,
            "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "price_source": self.price_source,
            "price_provenance": self.price_provenance or None,
            "price_borrowed_from": self.price_borrowed_from or None,
            "global_batch": self.global_batch,
            "feasible": self.feasible,
            "strategy": self.strategy_label or None,
            "strategy_params": self.strategy.model_dump() if self.strategy else None,
            "precision": self.precision or None,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "time_to_train_s": self.time_to_train_s,
            "time_to_train_days": (
                self.time_to_train_s / SECONDS_PER_DAY if self.time_to_train_s is not None else None
            ),
            "total_cost_usd": self.total_cost_usd,
            "usd_per_mtoken": self.usd_per_mtoken,
            "usd_per_hour": self.usd_per_hour,
            "gpu_hours": self.gpu_hours,
            "headroom_gib": self.headroom_gib,
            "meets_deadline": self.meets_deadline,
            "within_cost_cap": self.within_cost_cap,
            "rank": self.rank,
            "on_pareto": self.on_pareto,
            "n_trials": self.n_trials,
            "n_feasible": self.n_feasible,
            "reason": self.reason or None,
            "verify": list(self.verify),
            "tie": list(self.ties),
            "evidence": self.evidence.to_dict() if self.evidence is not None else None,
        }
        return band_doc(doc, self.band)

    @property
    def verify_text(self) -> str:
        """'verify: ...; measure it (autopar tune)' for an unusual chosen layout, else ''."""
        from autopar.costs.recipe_style import verify_text

        return verify_text(self.verify)


@dataclass
class ScenarioOption:
    """One option's figures under a sensitivity scenario (the model-error scenario also gives each end)."""

    label: str
    time_to_train_s: float
    total_cost_usd: float
    meets_deadline: bool | None
    rank: int | None
    time_to_train_s_low: float | None = None
    time_to_train_s_high: float | None = None
    total_cost_usd_low: float | None = None
    total_cost_usd_high: float | None = None


@dataclass
class SensitivityRow:
    """One what-if perturbation (a GPU's price ±20%, inter-node bandwidth halved) and its effect."""

    scenario: str  # human label, e.g. "H100-SXM price +20%"
    kind: str  # "price" | "internode_bw" | "model_error"
    gpu: str | None  # GPU whose price moved (None for bandwidth)
    factor: float  # multiplier applied (1.2, 0.8, 0.5; model error: 1, each option at its band's ends)
    winner: str | None  # label of the rank-1 option under the scenario
    runner_up: str | None  # label of the rank-2 option under the scenario
    winner_changed: bool  # winner differs from the baseline winner
    options: list[ScenarioOption] = field(default_factory=list)
    note: str = ""  # how it was computed (e.g. "chosen strategies re-estimated, not re-searched")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "scenario": self.scenario,
            "kind": self.kind,
            "gpu": self.gpu,
            "factor": self.factor,
            "winner": self.winner,
            "runner_up": self.runner_up,
            "winner_changed": self.winner_changed,
            "options": [o.__dict__.copy() for o in self.options],
            "note": self.note,
        }


@dataclass
class WhatIfResult:
    """Everything `run_whatif` found: per-option results, ranking, Pareto set, sensitivity."""

    model: ModelSpec
    workload: Workload  # token_budget set
    token_budget: float  # tokens to train
    tier: str
    goodput: float  # fraction of wall-clock time doing useful training (restarts, failures)
    deadline_s: float | None  # wall-clock deadline, seconds
    max_cost_usd: float | None  # spending cap, USD
    options: list[OptionResult]  # in the order given
    ranking: list[str]  # option labels, best first (feasible options only)
    pareto: list[str]  # labels on the cost-vs-time Pareto front, by increasing time
    sensitivity: list[SensitivityRow]
    message: str  # headline sentence (winner, or "no option meets the deadline; fastest is ...")
    seed: int
    search_budget: int  # trials per option
    wall_s: float
    prices_file: str | None = None
    notes: list[str] = field(default_factory=list)
    batch_tokens_per_gpu: float | None = None  # global batch = count x this (per option); None = fixed batch
    ties: list[Tie] = field(default_factory=list)  # options the model's band cannot rank (costs/bands.py)

    @property
    def winner(self) -> OptionResult | None:
        """The rank-1 option (None if nothing is feasible)."""
        return self.by_label(self.ranking[0]) if self.ranking else None

    @property
    def runner_up(self) -> OptionResult | None:
        """The rank-2 option (None if fewer than two are feasible)."""
        return self.by_label(self.ranking[1]) if len(self.ranking) > 1 else None

    @property
    def fastest(self) -> OptionResult | None:
        """The feasible option with the shortest time to train."""
        ok = [o for o in self.options if o.figures]
        return min(ok, key=lambda o: o.figures.time_to_train_s) if ok else None  # type: ignore[union-attr]  # ok keeps options with figures only

    @property
    def deadline_met(self) -> bool | None:
        """Whether any option meets the deadline (None without a deadline)."""
        if self.deadline_s is None:
            return None
        return any(o.meets_deadline for o in self.options)

    def by_label(self, label: str) -> OptionResult:
        """The option with this label."""
        for o in self.options:
            if o.label == label:
                return o
        raise KeyError(label)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (`autopar whatif --json`)."""
        return {
            "model": self.model.name,
            "tokens": self.token_budget,
            "seq_len": self.workload.seq_len,
            "global_batch": None if self.batch_tokens_per_gpu else self.workload.global_batch,
            "batch_tokens_per_gpu": self.batch_tokens_per_gpu,
            "precision": self.workload.precision,
            "tier": self.tier,
            "goodput": self.goodput,
            "deadline_s": self.deadline_s,
            "max_cost_usd": self.max_cost_usd,
            "deadline_met": self.deadline_met,
            "message": self.message,
            "options": [o.to_dict() for o in self.options],
            "ranking": list(self.ranking),
            "pareto": list(self.pareto),
            "ties": [t.to_dict() for t in self.ties],
            "sensitivity": [s.to_dict() for s in self.sensitivity],
            "seed": self.seed,
            "search_budget": self.search_budget,
            "wall_s": self.wall_s,
            "prices_file": self.prices_file,
            "notes": list(self.notes),
        }
