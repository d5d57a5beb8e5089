"""The verdict: what every search output says first, in one to three lines (issue 46, "verdict first").

Computed apart from rendering (Optuna's style): `verdict_info` reads the decision (reports/decision.py) and the
front, and returns a `Verdict` that the CLI prints as lines, `--json` writes as an object and the HTML report
shows above its figures. It says

1. the pick, its row on the printed front, its throughput with the corrector's 80% band, free memory and $/Mtoken;
2. the time and cost to train the token budget, each with the band it inherits from throughput (time =
   tokens / throughput, so the time band's short end comes from the throughput band's high end);
3. what the pick is a near-tie with: the front points within NEAR_TIE_FRACTION of it or faster at their centre,
   and why the pick was chosen among them (the higher low end of its band, or more free memory). Where such a
   point exists, only a measurement can order them, and the line says so and names `autopar tune`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from autopar.reports.decision import Decision, point_key
from autopar.reports.names import cluster_label
from autopar.reports.recipe import RecipeView
from autopar.search.recommend import NEAR_TIE_FRACTION
from autopar.search.result import SearchResult, TrialRecord
from autopar.units import SECONDS_PER_DAY, GiB, format_duration, format_tokens

# At most this many near-ties are named on the verdict's third line; the JSON lists them all.
NAMED_TIES = 2


@dataclass(frozen=True)
class TieMate:
    """A front point the pick cannot be told apart from: within NEAR_TIE_FRACTION of it, or faster at its centre."""

    label: str
    hardware: str
    row: int  # 1-based row on the front as printed (best throughput first); 0 when not on it
    tokens_per_s: float
    band: tuple[float, float] | None
    free_gib: float | None


@dataclass(frozen=True)
class Verdict:
    """The answer in figures (cluster tokens/s; days and US dollars for the token budget)."""

    role: str
    label: str
    hardware: str
    row: int
    tokens_per_s: float
    band: tuple[float, float] | None
    free_gib: float | None
    usd_per_mtoken: float | None
    tokens: float
    budget_given: bool
    train_days: float | None
    train_days_band: tuple[float, float] | None
    train_usd: float | None
    train_usd_band: tuple[float, float] | None
    ties: tuple[TieMate, ...]
    chosen_because: str  # why the pick over the ties ahead of it at their centre; '' when none is ahead

    def to_json(self) -> dict[str, object]:
        """The --json object: the figures, each band as `<field>_low` / `<field>_high` beside it."""
        out: dict[str, object] = {
            k: v for k, v in asdict(self).items() if k not in ("band", "train_days_band", "train_usd_band")
        }
        for name, band in (
            ("tokens_per_s", self.band),
            ("train_days", self.train_days_band),
            ("train_usd", self.train_usd_band),
        ):
            out[f"{name}_low"], out[f"{name}_high"] = band if band is not None else (None, None)
        out["ties"] = [asdict(t) for t in self.ties]
        out["lines"] = verdict_lines(self)
        return out


def _row_of(result: SearchResult, t: TrialRecord) -> int:
    """1-based row of `t` on the printed front (pareto_rows, best throughput first); 0 when absent."""
    key = point_key(t)
    for i, row in enumerate(result.pareto_rows):
        if (row["label"], row["gpu"], row["num_gpus"], row["precision"]) == key:
            return i + 1
    return 0


def _band(t: TrialRecord) -> tuple[float, float] | None:
    return t.estimate.tokens_per_s_band if t.estimate is not None else None


def _free(t: TrialRecord) -> float | None:
    return t.estimate.headroom_bytes / GiB if t.estimate is not None else None


def _front(result: SearchResult) -> list[TrialRecord]:
    return [r for r in result.trials if r.shown and "throughput" in r.values]


def near_ties(result: SearchResult, pick: TrialRecord) -> list[TrialRecord]:
    """Front points the pick stands for or was preferred to: within NEAR_TIE_FRACTION of its throughput, or
    faster at their centre; fastest first, one per point."""
    tps = pick.values["throughput"]
    seen = {point_key(pick)}
    out = []
    for r in sorted(_front(result), key=lambda r: -r.values["throughput"]):
        if point_key(r) in seen:
            continue
        if r.values["throughput"] >= (1 - NEAR_TIE_FRACTION) * tps:
            seen.add(point_key(r))
            out.append(r)
    return out


def _mate(result: SearchResult, r: TrialRecord) -> TieMate:
    return TieMate(
        r.strategy.label(),
        f"{cluster_label(r.gpu, r.num_gpus)} {r.precision}",
        _row_of(result, r),
        r.values["throughput"],
        _band(r),
        _free(r),
    )


def chosen_because(pick: TieMate, ahead: Sequence[TieMate]) -> str:
    """Why the pick over the points faster than it at their centre: what it leads them on."""
    if not ahead:
        return ""
    reasons = []
    low, lows = (pick.band or (None, None))[0], [m.band[0] for m in ahead if m.band is not None]
    if low is not None and lows and low > max(lows):
        reasons.append(f"the higher low end of its 80% band ({low / 1e3:,.0f}k vs {max(lows) / 1e3:,.0f}k)")
    frees = [m.free_gib for m in ahead if m.free_gib is not None]
    if pick.free_gib is not None and frees and pick.free_gib > max(frees):
        reasons.append(f"more free memory ({pick.free_gib:.1f} vs {max(frees):.1f} GiB)")
    return " and ".join(reasons) or "the near-tie rule (search/recommend.py)"


def _scaled(
    value: float | None, centre: float, band: tuple[float, float] | None
) -> tuple[float, float] | None:
    """The band of a quantity inversely proportional to throughput (time, cost) from the throughput band."""
    if value is None or band is None or min(band) <= 0:
        return None
    return value * centre / band[1], value * centre / band[0]


def verdict_info(result: SearchResult, d: Decision | None) -> Verdict | None:
    """The verdict for the decision's point (None when nothing was recommended or it has no throughput)."""
    if d is None or not d.tokens_per_s:
        return None
    t = d.card.trial
    me = _mate(result, t) if "throughput" in t.values else None
    tps = d.tokens_per_s
    ties = tuple(_mate(result, r) for r in near_ties(result, t)) if me is not None else ()
    band = d.band
    mtok = d.train_usd / d.tokens * 1e6 if d.train_usd is not None else None
    return Verdict(
        role=d.card.title,
        label=t.strategy.label(),
        hardware=d.where,
        row=me.row if me is not None else _row_of(result, t),
        tokens_per_s=tps,
        band=band,
        free_gib=d.headroom_gib,
        usd_per_mtoken=mtok,
        tokens=d.tokens,
        budget_given=d.budget_given,
        train_days=d.train_days,
        train_days_band=_scaled(d.train_days, tps, band),
        train_usd=d.train_usd,
        train_usd_band=_scaled(d.train_usd, tps, band),
        ties=ties,
        chosen_because=chosen_because(me, [m for m in ties if m.tokens_per_s > tps]) if me else "",
    )


def _k(x: float) -> str:
    return f"{x / 1e3:,.0f}k" if x >= 1e4 else f"{x:,.0f}"


def _days(x: float) -> str:
    """'149', '2,241', '3.5': three significant figures, never in exponent form."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _usd(x: float) -> str:
    for suffix, mult in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= mult:
            return f"${x / mult:.3g}{suffix}"
    return f"${x:,.0f}"


def _first_line(v: Verdict) -> str:
    row = f" (row {v.row} ★)" if v.row else ""
    band = f" (80% band {_k(v.band[0])}–{_k(v.band[1])})" if v.band else ""
    free = f", {v.free_gib:.1f} GiB free per GPU" if v.free_gib is not None else ""
    cost = f", ${v.usd_per_mtoken:.3g}/Mtoken" if v.usd_per_mtoken is not None else ""
    return f"pick{row}: {v.label} on {v.hardware}: {v.tokens_per_s:,.0f} tokens/s{band}{free}{cost}"


def _train_line(v: Verdict) -> str:
    if v.train_days is None:
        return ""
    days = format_duration(v.train_days * SECONDS_PER_DAY)
    if v.train_days_band:
        lo, hi = v.train_days_band
        days += f" ({_days(lo)}–{_days(hi)} days)"
    cost = ""
    if v.train_usd is not None:
        cost = f" and {_usd(v.train_usd)}"
        if v.train_usd_band:
            cost += f" ({_usd(v.train_usd_band[0])}–{_usd(v.train_usd_band[1])})"
    what = f"{format_tokens(v.tokens)} tokens" + ("" if v.budget_given else " (no --tokens given)")
    return f"to train {what}: {days}{cost}"


def _tie_line(v: Verdict) -> str:
    if not v.ties:
        return f"no other point on the front comes within {100 * NEAR_TIE_FRACTION:.0f}% of it"
    named = "; ".join(
        f"{m.label}"
        + (f" (row {m.row})" if m.row else "")
        + f" {100 * (m.tokens_per_s / v.tokens_per_s - 1):+.1f}%"
        for m in v.ties[:NAMED_TIES]
    )
    more = f" and {len(v.ties) - NAMED_TIES} more" if len(v.ties) > NAMED_TIES else ""
    why = f"; chosen for {v.chosen_because}" if v.chosen_because else ""
    return (
        f"near-tie with {named}{more}{why}: inside the model's band only a measurement orders them "
        "(autopar tune runs them on your cluster)"
    )


def verdict_lines(v: Verdict) -> list[str]:
    """The verdict in one to three lines: pick and figures; time and cost to train; the near-ties."""
    return [line for line in (_first_line(v), _train_line(v), _tie_line(v)) if line]


def recipe_line(view: RecipeView, pick_band: tuple[float, float] | None) -> str:
    """The published recipe beside the pick in one line: its layout, its prediction with band, and whether the
    pick's predicted gain leaves the recipe's band (the full comparison: RecipeView.sentence, --explain)."""
    head = f"{view.label} ({view.name})"
    if view.tokens_per_s is None or view.ratio is None:
        return f"{head}: not estimated on this problem"
    band = f" ({_k(view.band[0])}–{_k(view.band[1])})" if view.band else ""
    gain = 100 * (view.ratio - 1)
    theirs = pick_band if view.against == "the pick" else view.against_band
    overlap = view.band is not None and theirs is not None and theirs[0] <= view.band[1]
    claim = (
        "the bands overlap: a claim to verify by measuring both" if overlap else "beyond the recipe's band"
    )
    return f"{head}: predicted {view.tokens_per_s:,.0f} tokens/s{band}; {view.against} {gain:+.1f}%, {claim}"
