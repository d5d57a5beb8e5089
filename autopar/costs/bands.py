"""The model's 80% band carried into money and time: every time and cost a what-if or a sizing shows has a
low and a high end, and options whose bands overlap are a tie.

The band comes from the calibration corrector (autopar/calibration/apply/model.py, models/predictor.py), widened for the
layout's novelty (calibration/evaluation/novelty.py): `Estimate.tokens_per_s_band`, the same band `optimize`'s Pareto
rows carry as `throughput_low`/`throughput_high`. Time and cost follow from throughput (costs/figures.py):

    time = tokens / (T x goodput)        cost = N x price x time / 3600

so both fall as throughput rises: the time and cost band's LOW end comes from the throughput band's HIGH
end, and their high end from its low end. JSON names each end `<field>_low` / `<field>_high` beside the field.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autopar.costs.figures import CostFigures, cost_figures, format_usd_short
from autopar.units import SECONDS_PER_DAY, SECONDS_PER_HOUR, SECONDS_PER_MINUTE

Range = tuple[float, float]
# The band's coverage (the corrector's nominal level), named in every sentence and table title that shows it.
BAND_NAME = "80% band"


def relative_band(estimate: Any) -> Range | None:
    """The estimate's throughput band as factors of its centre (low <= 1 <= high), or None without a band
    (uncalibrated). A band that misses its centre is stretched to include it, as search/evidence.py's
    low_factor caps the low end at the centre."""
    band = getattr(estimate, "tokens_per_s_band", None)
    centre = getattr(estimate, "tokens_per_s", 0.0)
    if band is None or not centre > 0:
        return None
    lo, hi = band[0] / centre, band[1] / centre
    if not (lo > 0 and math.isfinite(hi)):
        return None
    return min(lo, 1.0), max(hi, 1.0)


def inverse_band(estimate: Any, value: float) -> Range | None:
    """The band of a figure inversely proportional to the estimate's tokens/s (step time, $/Mtoken, time and
    cost to train): value / the high factor to value / the low factor; None without a band."""
    f = relative_band(estimate)
    return None if f is None else (value / f[1], value / f[0])


@dataclass(frozen=True)
class FigureBand:
    """The low and high end of each figure of one option (the corrector's 80% band on its throughput)."""

    tokens_per_s: Range
    usd_per_mtoken: Range
    time_to_train_s: Range | None  # None without a token budget
    total_cost_usd: Range | None
    gpu_hours: Range | None

    @property
    def time_to_train_days(self) -> Range | None:
        t = self.time_to_train_s
        return None if t is None else (t[0] / SECONDS_PER_DAY, t[1] / SECONDS_PER_DAY)


def figure_band(figs: CostFigures, factors: Range | None) -> FigureBand | None:
    """Each figure at both ends of the throughput band `factors` (relative_band); None without one."""
    if factors is None:
        return None
    slow = cost_figures(
        figs.tokens_per_s * factors[0], figs.num_gpus, figs.usd_per_gpu_hour, figs.token_budget, figs.goodput
    )
    fast = cost_figures(
        figs.tokens_per_s * factors[1], figs.num_gpus, figs.usd_per_gpu_hour, figs.token_budget, figs.goodput
    )

    def span(name: str) -> Range | None:  # fast end first: every money and time figure falls with speed
        lo, hi = getattr(fast, name), getattr(slow, name)
        return None if lo is None or hi is None else (lo, hi)

    return FigureBand(
        tokens_per_s=(slow.tokens_per_s, fast.tokens_per_s),
        usd_per_mtoken=(fast.usd_per_mtoken, slow.usd_per_mtoken),
        time_to_train_s=span("time_to_train_s"),
        total_cost_usd=span("total_cost_usd"),
        gpu_hours=span("gpu_hours"),
    )


def with_band(doc: dict[str, Any], field: str, band: Range | None) -> dict[str, Any]:
    """`doc` with `<field>_low` and `<field>_high` inserted right after `field` (None without a band)."""
    out: dict[str, Any] = {}
    for k, v in doc.items():
        out[k] = v
        if k == field:
            out[f"{field}_low"], out[f"{field}_high"] = band if band is not None else (None, None)
    return out


def band_doc(doc: dict[str, Any], band: FigureBand | None) -> dict[str, Any]:
    """An option's JSON with `_low`/`_high` beside each banded figure (the names optimize's rows use)."""
    fields = (
        "tokens_per_s", "time_to_train_s", "time_to_train_days", "total_cost_usd", "usd_per_mtoken", "gpu_hours",
    )  # fmt: skip
    for f in fields:
        doc = with_band(doc, f, getattr(band, f) if band is not None else None)
    return doc


def overlaps(a: Range, b: Range) -> bool:
    """Whether two closed ranges share a point."""
    return a[0] <= b[1] and b[0] <= a[1]


def half_width_pct(centre: float, band: Range) -> float:
    """The band's half-width in % of its centre: (high - low) / 2 / centre."""
    return 100 * (band[1] - band[0]) / 2 / centre


# ------------------------------------------------------------------------------------------- text


def _num(x: float) -> str:
    """Two significant figures for a range end, no exponent: '1.8', '25', '134', '1,100'."""
    if abs(x) >= 99.5:
        return f"{x:,.0f}"
    return f"{x:.0f}" if abs(x) >= 9.95 else f"{x:.2g}"


def _duration_unit(seconds: float) -> tuple[float, str]:
    """format_duration's unit for `seconds` (days, hours, minutes, seconds) as (seconds per unit, suffix)."""
    for unit, suffix in ((SECONDS_PER_DAY, " d"), (SECONDS_PER_HOUR, " h"), (SECONDS_PER_MINUTE, " min")):
        if seconds >= 2 * unit:
            return unit, suffix
    return 1.0, " s"


def duration_range(seconds: float, band: Range | None) -> str:
    """'28.5 d (25–33)': the table's duration and its band in the same unit ('28.5 d' without a band)."""
    from autopar.units import format_duration_short

    text = format_duration_short(seconds)
    if band is None:
        return text
    unit, _ = _duration_unit(seconds)
    return f"{text} ({_num(band[0] / unit)}–{_num(band[1] / unit)})"


def duration_span(band: Range) -> str:
    """'25–33 d': a band alone, in the unit of its low end."""
    unit, suffix = _duration_unit(band[0])
    return f"{_num(band[0] / unit)}–{_num(band[1] / unit)}{suffix}"


def _usd_unit(usd: float) -> tuple[float, str]:
    for suffix, mult in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(usd) >= mult:
            return mult, suffix
    return 1.0, ""


def usd_range(usd: float, band: Range | None) -> str:
    """'$2.07M (1.8–2.4M)': the table's dollars and the band in the unit of its high end ('$959K (0.86–1.2M)';
    '$2.07M' without a band)."""
    text = format_usd_short(usd)
    return text if band is None else f"{text} ({usd_span(band).removeprefix('$')})"


def usd_span(band: Range) -> str:
    """'$1.8–2.4M': a band of dollars alone, in the unit of its high end."""
    mult, suffix = _usd_unit(band[1])
    return f"${_num(band[0] / mult)}–{_num(band[1] / mult)}{suffix}"


def number_range(value: float, band: Range | None, spec: str) -> str:
    """'0.844 (0.76–1.03)': a plain figure and its band, each formatted with `spec`."""
    text = format(value, spec)
    return text if band is None else f"{text} ({format(band[0], spec)}–{format(band[1], spec)})"


# ------------------------------------------------------------------------------------------- ties

# The figures a tie is called on, and the plain word for each.
TIE_FIELDS = {"cost": "total_cost_usd", "time": "time_to_train_s"}


@dataclass(frozen=True)
class Tie:
    """Options whose band on one figure overlaps the best option's: the model cannot rank them."""

    on: str  # "cost" or "time"
    labels: tuple[str, ...]  # the best option on it first
    half_width_pct: float  # the widest of their bands, ± % of its centre

    def sentence(self) -> str:
        """'B200:64 and MI300X:64: a tie on cost within the model's band (±13%); measure before buying'."""
        names = ", ".join(self.labels[:-1]) + f" and {self.labels[-1]}"
        return (
            f"{names}: a tie on {self.on} within the model's band (±{self.half_width_pct:.0f}%); "
            "measure before buying"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"on": self.on, "options": list(self.labels), "band_pct": self.half_width_pct}


@dataclass(frozen=True)
class Banded:
    """What a tie needs of one option: its label, central figures, their bands, and which limits it meets."""

    label: str
    figures: dict[str, float]  # TIE_FIELDS values -> central value
    bands: dict[str, Range]  # the same keys -> band (absent: no band)
    group: tuple[bool | None, ...] = ()  # (meets the deadline, within the cap): a cost tie stays in one group


def ties_with(best: Banded, others: Sequence[Banded], on: str) -> Tie | None:
    """The tie on `on` between `best` and the others whose band overlaps its band (on cost: only those meeting
    the same limits, as the ranking puts an option that breaks one behind); None when no band overlaps (or
    `best` has no band: an uncalibrated model states no band to tie within)."""
    field = TIE_FIELDS[on]
    band = best.bands.get(field)
    if band is None:
        return None
    tied = [
        o
        for o in others
        if o.label != best.label
        and (on != "cost" or o.group == best.group)
        and field in o.bands
        and overlaps(band, o.bands[field])
    ]
    if not tied:
        return None
    width = max(half_width_pct(x.figures[field], x.bands[field]) for x in (best, *tied))
    return Tie(on, (best.label, *(o.label for o in tied)), width)


def find_ties(
    options: Sequence[Banded], winner: str | None, on: Sequence[str] = ("cost", "time")
) -> list[Tie]:
    """The tie on cost with the recommended option (`winner`) and the tie on time with the fastest one
    (those of `on`)."""
    if not options:
        return []
    by = {o.label: o for o in options}
    fastest = min(options, key=lambda o: o.figures[TIE_FIELDS["time"]])
    out = []
    for what, best in (("cost", by.get(winner or "")), ("time", fastest)):
        tie = ties_with(best, options, what) if best is not None and what in on else None
        if tie is not None:
            out.append(tie)
    return out
