"""The published recipe beside the pick (issue 21): what it is, its prediction, why the two differ, and the model's
record on measured pairs at that gain. Free of plotly, so `optimize --json` can carry it (tests/cli/test_startup.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autopar.calibration.evaluation.pairs import pair_record
from autopar.calibration.planning.recipes import Support
from autopar.calibration.planning.support import BATCH_DOUBLINGS, SCALE_DOUBLINGS
from autopar.perf.types import Estimate
from autopar.reports.comparison import STEP_SPLIT
from autopar.reports.names import cluster_label
from autopar.search.recommend import NEAR_TIE_FRACTION
from autopar.search.result import SearchResult, TrialRecord

# A difference on an objective is material only beyond NEAR_TIE_FRACTION (search/recommend.py: no
# measurement we have ranks points closer than that): relative to the value for ratio objectives, and
# of the GPU's memory for headroom (the memory model's error scales with the memory used, not with
# what is left over).
MATERIAL_FRACTION = NEAR_TIE_FRACTION


# A time component explains the pick-vs-recipe difference when it moves by at least this fraction of the
# pick's step (1%: below it the split rounds away in the compare table); at most REASONS_SHOWN are named.
REASON_FRACTION = 0.01
REASONS_SHOWN = 3


@dataclass(frozen=True)
class RecipeView:
    """The published recipe beside the pick: what it is, its prediction and why the two differ."""

    name: str  # the recipe's id, e.g. LLAMA3_70B_PRETRAIN_CONFIG_H100_BF16_V1
    source: str
    label: str  # its strategy as estimated
    tokens_per_s: float | None
    band: tuple[float, float] | None
    ratio: float | None  # pick / recipe, predicted
    reasons: tuple[str, ...]  # the step-time components that differ most, 'compute 52.9 s vs 56.1 s'
    remarks: tuple[str, ...]  # global batch or stack differences, the published measurement, evidence
    record: str = ""  # the model's record on measured pairs separated by this much (evaluation/pairs.py)
    against: str = (
        "the pick"  # what `ratio` compares: the pick, or the search's best on the recipe's hardware
    )
    against_band: tuple[float, float] | None = None  # that point's 80% band (tokens/s)

    def sentence(self, reasons: bool = True) -> str:
        """The recipe in one paragraph (CLI and report; the report lists the reasons apart)."""
        head = f"Published recipe for this problem: {self.label} ({self.name}; {self.source})"
        if self.tokens_per_s is None or self.ratio is None:
            return head + ". " + " ".join(self.remarks)
        band = f", 80% band {self.band[0]:,.0f}–{self.band[1]:,.0f}" if self.band else ""
        rel = 100 * (self.ratio - 1)
        verdict = (
            f"within {100 * MATERIAL_FRACTION:.0f}% of the pick: a near-tie, and the recipe is the "
            "better-evidenced choice"
            if abs(rel) <= 100 * MATERIAL_FRACTION
            else f"{self.against} is predicted {abs(rel):.1f}% {'faster' if rel > 0 else 'slower'}"
        )
        why = f"; the step differs most in {and_join(self.reasons)}" if self.reasons and reasons else ""
        after = [self.record] if self.record and abs(rel) > 100 * MATERIAL_FRACTION else []
        return f"{head}: predicted {self.tokens_per_s:,.0f} tokens/s{band}; {verdict}{why}." + "".join(
            " " + x for x in (*after, *self.remarks)
        )


def and_join(items: Sequence[str]) -> str:
    """'', 'a', 'a and b', 'a, b and c'."""
    return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + items[-1] if items else ""


def _reasons(pick: Estimate, rec: Estimate) -> tuple[str, ...]:
    """The STEP_SPLIT components (as `autopar compare` names them) that differ most, pick vs recipe."""
    step = pick.step_time_s or 1.0
    diffs = []
    for field_, name in STEP_SPLIT:
        a, b = getattr(pick.time, field_), getattr(rec.time, field_)
        if abs(a - b) >= REASON_FRACTION * step:
            diffs.append((-abs(a - b), name.split(" (")[0], a, b))
    return tuple(
        f"{n} {a:.1f} s (pick) vs {b:.1f} s (recipe)" for _, n, a, b in sorted(diffs)[:REASONS_SHOWN]
    )


def _recipe_remarks(result: SearchResult, rb: Any, pick: TrialRecord) -> tuple[str, ...]:
    r, w = rb.recipe, result.workload
    out = []
    if (r.gpu, r.num_gpus, r.precision) != (pick.gpu, pick.num_gpus, pick.precision):
        out.append(
            f"The recipe is for {cluster_label(r.gpu, r.num_gpus)} · {r.precision}; the pick runs on "
            f"{cluster_label(pick.gpu, pick.num_gpus)} · {pick.precision}."
        )
    if r.global_batch != w.global_batch:
        out.append(f"The recipe was tuned at global batch {r.global_batch} (this problem: {w.global_batch}).")
    if r.framework != w.framework:
        out.append(f"It runs on {r.framework} (this search: {w.framework}).")
    if r.measured is not None:
        out.append(f"Published measurement: {r.measured:,.0f} tokens/s per GPU.")
    if r.demonstration:
        out.append(
            f"Not a tuned recipe: it comes from {r.demonstration}, so a gain over it is not a gain over a "
            "layout its team swept."
        )
    if r.support is not None:
        same = (
            "same model, GPU and sequence, a precision no faster"
            if r.support.stack
            else "same model, GPU, precision, sequence and software"
        )
        out.append(
            f"The recipe is not the measured best of its problem: {r.support.sentence()} ({same}; GPU count "
            f"within {SCALE_DOUBLINGS} doublings, sequences per GPU within {BATCH_DOUBLINGS})."
        )
    if rb.evidence is not None and rb.evidence.beyond:
        out.append(rb.evidence.sentence())
    if rb.estimate is None:
        out.append(f"The model could not estimate it: {rb.reason}")
    return tuple(out)


def recipe_view(result: SearchResult, pick: TrialRecord) -> RecipeView | None:
    """The recipe matching the search's problem (SearchResult.recipe) against the pick, or None."""
    rb = getattr(result, "recipe", None)
    if rb is None:
        return None
    est, pe = rb.estimate, pick.estimate
    label = (
        est.strategy if est is not None and est.strategy is not None else rb.recipe.strategy(result.model)
    ).label()
    pick, against = _on_recipe_hardware(result, rb.recipe, pick)
    pe = pick.estimate
    if est is None or pe is None or est.tokens_per_s <= 0:
        return RecipeView(
            rb.recipe.id, rb.recipe.source, label, None, None, None, (), _recipe_remarks(result, rb, pick)
        )
    ratio = pe.tokens_per_s / est.tokens_per_s
    return RecipeView(
        name=rb.recipe.id,
        source=rb.recipe.source,
        label=label,
        tokens_per_s=est.tokens_per_s,
        band=est.tokens_per_s_band,
        ratio=ratio,
        reasons=_reasons(pe, est),
        remarks=_recipe_remarks(result, rb, pick) + _beyond_support(ratio, rb.recipe.support),
        record=pair_sentence(ratio),
        against=against,
        against_band=pe.tokens_per_s_band,
    )


def _on_recipe_hardware(result: SearchResult, recipe: Any, pick: TrialRecord) -> tuple[TrialRecord, str]:
    """What to set against the recipe: the pick when it runs on the recipe's hardware; else the fastest point
    the table shows (front or near-tie) on the recipe's GPU and count, so a 512-GPU pick is not set against a
    64-GPU recipe as a gain (the pick itself when the table has no such point)."""
    if (pick.gpu, pick.num_gpus) == (recipe.gpu, recipe.num_gpus):
        return pick, "the pick"
    same = [
        t
        for t in result.trials
        if t.shown and (t.gpu, t.num_gpus) == (recipe.gpu, recipe.num_gpus) and "throughput" in t.values
    ]
    if not same:
        return pick, "the pick"
    best = max(same, key=lambda t: (t.values["throughput"], -t.number))
    return (
        best,
        f"the search's best on the recipe's {recipe.num_gpus} x {recipe.gpu} ({best.strategy.label()})",
    )


def _beyond_support(ratio: float, support: Support | None) -> tuple[str, ...]:
    """What the pick claims beyond the measured run that beat the recipe (calibration/planning/support.py), if any."""
    if support is None or ratio <= 1.0:
        return ()
    return (
        f"Of the pick's predicted {100 * (ratio - 1):+.0f}% over the recipe, that run already measured "
        f"x{support.gain:.2f}; beyond it the pick claims {100 * (ratio / support.gain - 1):+.0f}%.",
    )


def pair_sentence(ratio: float) -> str:
    """What the model's record on measured layout pairs says of a predicted ratio ('' for a near-tie or
    without the shipped record)."""
    record = pair_record()
    group = record.for_gain(ratio) if record is not None else None
    return group.sentence() if group is not None else ""


def recipe_json(result: SearchResult) -> dict[str, Any] | None:
    """The recipe beside the first recommendation as `optimize --json` gives it (None without one): the
    recipe, its prediction and band, pick/recipe, the step terms that differ, and the model's record on
    measured pairs at that gain (calibration/evaluation/pairs.py; null for a near-tie)."""
    if not result.recommended:
        return None
    view = recipe_view(result, result.recommended[0].trial)
    if view is None:
        return None
    record = pair_record()
    group = record.for_gain(view.ratio) if record is not None and view.ratio is not None else None
    return {
        "id": view.name,
        "source": view.source,
        "strategy": view.label,
        "tokens_per_s": view.tokens_per_s,
        "band": list(view.band) if view.band else None,
        "pick_over_recipe": view.ratio,
        "against": view.against,  # the pick, or the search's best on the recipe's GPU and count
        "differs_most": list(view.reasons),
        "remarks": list(view.remarks),
        "tuned": not result.recipe.recipe.demonstration if result.recipe is not None else None,
        "measured_support": _support_json(result, view.ratio),
        "record": None
        if group is None
        else {
            "predicted_gain": group.span(),
            "pairs": group.pairs,
            "measured_faster_share": group.held_share,
            "realised_median": group.realised_median,
            "realised_p20": group.realised_low,
            "holds": group.holds,
        },
    }


def _support_json(result: SearchResult, ratio: float | None) -> dict[str, Any] | None:
    """The published run measured faster than the recipe (calibration/planning/support.py) and the pick's predicted
    gain over the recipe divided by it (`pick_beyond`; null without a prediction), or None."""
    sup = result.recipe.recipe.support if result.recipe is not None else None
    if sup is None:
        return None
    return {
        "id": sup.id,
        "strategy": sup.strategy,
        "num_gpus": sup.num_gpus,
        "global_batch": sup.global_batch,
        "tokens_per_s_per_gpu": sup.measured,
        "over_recipe": sup.gain,
        "other_stack": sup.stack or None,
        "pick_beyond": ratio / sup.gain if ratio is not None else None,
    }


def recipe_text(result: SearchResult) -> str:
    """The recipe paragraph for the first recommendation's point ('' without a matching recipe)."""
    if not result.recommended:
        return ""
    view = recipe_view(result, result.recommended[0].trial)
    return view.sentence() if view is not None else ""
