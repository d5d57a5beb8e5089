"""What the search report shows first: the recommendation cards and the decision.

Pure functions over the search's recommendations (Optuna's style: the information is computed apart
from the drawing, and `html.py` only renders it):

- `recommendation_cards`: one card per distinct recommended point, carrying every role that chose it
  (on one fixed cluster cost is price x GPUs / throughput, so "fastest" and "cheapest" are one card);
  each card after the first says what it buys against the first and what it gives up, and a
  "balanced" card that buys nothing material is dropped.
- `decision_info`: the first card's strategy, throughput (with the corrector's band), time and cost to
  train the token budget, and what it would take to do better (the bottleneck, memory, the front's
  best point on each objective it does not lead, more GPUs); whether a published run resembles it, and
  the published recipe for the problem beside it (`recipe_view`: its prediction and the step-time
  components that differ, as `autopar compare` splits the step).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autopar.reports.names import cluster_label, role_title, trial_cluster
from autopar.reports.recipe import (  # noqa: F401 - re-exported: the decision card shows the recipe
    MATERIAL_FRACTION,
    RecipeView,
    and_join,
    pair_sentence,
    recipe_json,
    recipe_text,
    recipe_view,
)
from autopar.search.recommend import SAFE_SPEED_FRACTION, bottleneck_hint
from autopar.search.result import ObjectiveInfo, Recommendation, SearchResult, TrialRecord
from autopar.units import SECONDS_PER_DAY, GiB, usd_per_mtoken

# Memory "binds" when less than this fraction of the GPU is free: the next memory-hungry change (a
# larger micro-batch, less recompute) typically needs more than a tenth of the GPU.
MEMORY_BINDS_FRACTION = 0.10
# Time and cost are shown for the token budget; without one (--token-budget not given), per this many
# tokens: a round figure of the order of a current pre-training run (Llama 3: 15 T).
REFERENCE_TOKENS = 1e12
MINUS = "\u2212"  # typographic minus for signed changes


def point_key(t: TrialRecord) -> tuple[str, str, int, str]:
    """Two recommendations name the same point when strategy, GPU, GPU count and precision agree
    (the near-tie choice can pick equal points found as different trials)."""
    return (t.strategy.label(), t.gpu, t.num_gpus, t.precision)


def _signed(x: float, digits: int = 1) -> str:
    text = f"{abs(x):.{digits}f}"
    return f"+{text}" if x >= 0 else f"{MINUS}{text}"


def change_words(name: str, a: float, b: float) -> str:
    """How b differs from a on objective `name`, signed: '+23.0 GiB headroom', '−8.4% throughput'."""
    if name == "headroom":
        return f"{_signed(b - a)} GiB headroom"
    if name == "mfu":
        return f"{_signed(b - a)} points MFU"
    rel = (b - a) / abs(a) * 100 if a else 0.0
    noun = {"step_time": "step time"}.get(name, name)
    return f"{_signed(rel)}% {noun}"


def _capacity_gib(t: TrialRecord) -> float | None:
    return t.estimate.capacity_bytes / GiB if t.estimate is not None else None


def material(o: ObjectiveInfo, a: TrialRecord, b: TrialRecord) -> int:
    """+1 when b is materially better than a on objective `o`, -1 when materially worse, else 0."""
    va, vb = a.values.get(o.name), b.values.get(o.name)
    if va is None or vb is None:
        return 0
    scale = _capacity_gib(a) if o.name == "headroom" else abs(va)
    if scale is None:  # headroom without an estimate: relative to the value
        scale = abs(va)
    if abs(vb - va) <= MATERIAL_FRACTION * scale:
        return 0
    better = vb > va if o.direction == "maximize" else vb < va
    return 1 if better else -1


@dataclass(frozen=True)
class Trade:
    """What point b buys (gains) and gives up (losses) against point a, objective by objective."""

    gains: tuple[str, ...]
    losses: tuple[str, ...]


def trade(objectives: Sequence[ObjectiveInfo], a: TrialRecord, b: TrialRecord) -> Trade:
    """The material changes from a to b, in words."""
    gains: list[str] = []
    losses: list[str] = []
    for o in objectives:
        m = material(o, a, b)
        if m:
            (gains if m > 0 else losses).append(change_words(o.name, a.values[o.name], b.values[o.name]))
    return Trade(tuple(gains), tuple(losses))


@dataclass(frozen=True)
class Card:
    """One recommended point with every role that chose it; `buys` says why one would take it over the
    first card ('' on the first card)."""

    roles: tuple[str, ...]
    trial: TrialRecord
    whys: tuple[str, ...]
    buys: str = ""

    @property
    def title(self) -> str:
        return " · ".join(role_title(r) for r in self.roles)


def recommendation_cards(
    recommended: Sequence[Recommendation], objectives: Sequence[ObjectiveInfo]
) -> list[Card]:
    """One card per distinct point, roles merged, in the order the search gave the roles; cards after the
    first carry what they buy against it, and a card chosen only as "balanced" that buys nothing
    material is left out."""
    groups: dict[tuple[str, str, int, str], list[Recommendation]] = {}
    for r in recommended:
        groups.setdefault(point_key(r.trial), []).append(r)
    cards: list[Card] = []
    for recs in groups.values():
        t = recs[0].trial
        roles = tuple(dict.fromkeys(r.role for r in recs))
        whys = tuple(r.why for r in recs if r.why)
        if not cards:
            cards.append(Card(roles, t, whys))
            continue
        head = cards[0]
        tr = trade(objectives, head.trial, t)
        if not tr.gains and roles == ("balanced",):
            continue  # a compromise that buys nothing against the first card is no choice
        buys = (
            f"Against {head.title.lower()}: buys {and_join(tr.gains)}"
            + (f" for {and_join(tr.losses)}" if tr.losses else "")
            + "."
            if tr.gains
            else f"Within {100 * MATERIAL_FRACTION:.0f}% of {head.title.lower()} on every objective."
        )
        cards.append(Card(roles, t, whys, buys))
    return cards


@dataclass(frozen=True)
class Decision:
    """The answer shown first: the first card's point and the figures a reader decides on."""

    card: Card
    where: str  # '64 × H100-SXM · bf16'
    tokens_per_s: float | None
    band: tuple[float, float] | None  # the corrector's 80% band (cluster tokens/s), None uncalibrated
    mfu: float | None  # fraction
    headroom_gib: float | None
    capacity_gib: float | None
    tokens: float  # the token budget, or REFERENCE_TOKENS
    budget_given: bool
    train_days: float | None
    train_usd: float | None
    better: tuple[str, ...]  # what it would take to do better, one sentence each
    evidence: str = ""  # "No published run resembles this layout: ..." (search/evidence.py), else ''
    recipe: RecipeView | None = None  # the published recipe for this problem beside the pick


def _usd_per_mtoken(result: SearchResult, t: TrialRecord, tps: float) -> float | None:
    """$/Mtoken of a point: the cost objective's value, else from the cluster's price."""
    if "cost" in t.values:
        return t.values["cost"]
    price = trial_cluster(result, t).price_usd_per_gpu_hour
    return usd_per_mtoken(tps, t.num_gpus, price) if price is not None and tps > 0 else None


def decision_info(result: SearchResult, cards: Sequence[Card]) -> Decision | None:
    """The first card's figures and what would do better (None when nothing was recommended)."""
    if not cards:
        return None
    card = cards[0]
    t, e = card.trial, card.trial.estimate
    tps = t.values.get("throughput", e.tokens_per_s if e is not None else None)
    budget = result.workload.token_budget
    tokens = float(budget) if budget else REFERENCE_TOKENS
    mtok = _usd_per_mtoken(result, t, tps) if tps else None
    return Decision(
        card=card,
        where=f"{cluster_label(t.gpu, t.num_gpus)} · {t.precision}",
        tokens_per_s=tps,
        band=e.tokens_per_s_band if e is not None else None,
        mfu=e.mfu if e is not None else None,
        headroom_gib=e.headroom_bytes / GiB if e is not None else None,
        capacity_gib=_capacity_gib(t),
        tokens=tokens,
        budget_given=bool(budget),
        train_days=tokens / tps / SECONDS_PER_DAY if tps else None,
        train_usd=mtok * tokens / 1e6 if mtok is not None else None,
        better=tuple(better_hints(result, t)),
        evidence=next((r.evidence for r in result.recommended if r.trial is t and r.evidence), ""),
        recipe=recipe_view(result, t),
    )


def _front(result: SearchResult) -> list[TrialRecord]:
    return sorted((r for r in result.trials if r.shown), key=lambda r: r.number)


def objective_leads(result: SearchResult, t: TrialRecord) -> list[str]:
    """For each objective t does not lead materially, the front's best point on it and what it trades,
    one sentence per point (objectives that share a best point share the sentence). Headroom is looked
    for among points within SAFE_SPEED_FRACTION of the best throughput, as the most-headroom role does."""
    by_point: dict[tuple[str, str, int, str], tuple[TrialRecord, list[ObjectiveInfo]]] = {}
    front = _front(result)
    best_tps = max((r.values.get("throughput", 0.0) for r in front), default=0.0)
    for o in result.objectives:
        pool = [r for r in front if o.name in r.values]
        if o.name == "headroom" and best_tps > 0:  # as the most-headroom role: not a uselessly slow point
            pool = [
                r for r in pool if r.values.get("throughput", 0.0) >= SAFE_SPEED_FRACTION * best_tps
            ] or pool
        if not pool:
            continue
        sign = -1.0 if o.direction == "maximize" else 1.0
        best = min(pool, key=lambda r, o=o, s=sign: (s * r.values[o.name], r.number))
        if material(o, t, best) > 0:
            by_point.setdefault(point_key(best), (best, []))[1].append(o)
    out = []
    for best, objs in by_point.values():
        tr = trade(result.objectives, t, best)
        gains = [change_words(o.name, t.values[o.name], best.values[o.name]) for o in objs]
        hw = (
            ""
            if (best.gpu, best.num_gpus) == (t.gpu, t.num_gpus)
            else f" on {cluster_label(best.gpu, best.num_gpus)}"
        )
        at = f", at {and_join(list(tr.losses))}" if tr.losses else ""
        out.append(f"{and_join(gains)}: {best.strategy.label()}{hw}{at}.")
    return out


def better_hints(result: SearchResult, t: TrialRecord) -> list[str]:
    """What it would take to beat point t: what limits its step, whether memory binds, the front's
    best point on each objective t does not lead, and hardware not searched."""
    out: list[str] = []
    e = t.estimate
    if e is not None:
        what, hint = bottleneck_hint(e, t)
        out.append(f"The step is {what}" + (f": {hint}." if hint else "."))
        free, cap = e.headroom_bytes / GiB, e.capacity_bytes / GiB
        if free < MEMORY_BINDS_FRACTION * cap:
            out.append(
                f"Memory binds: {free:.1f} of {cap:.1f} GiB free per GPU; ZeRO-3, more recompute or more "
                "GPUs free memory for a faster layout."
            )
        else:
            out.append(f"Memory does not bind: {free:.1f} of {cap:.1f} GiB free per GPU.")
    out += [f"More on the front — {s}" for s in objective_leads(result, t)]
    hardware = {(c.gpu.name, c.num_gpus) for c in result.clusters}
    if len(hardware) == 1:
        out.append(
            f"Only {cluster_label(t.gpu, t.num_gpus)} was searched: --gpus (e.g. {t.num_gpus}..{4 * t.num_gpus}) "
            "or --gpu A,B shows how time to train and cost move with the hardware."
        )
    return out
