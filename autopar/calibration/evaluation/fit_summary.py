"""What `calibrate fit` did for your runs, in plain words, every number taken from the fit itself.

Your runs are the store's runs that are not among the published runs the default calibration was fitted on
(the default never saw them, so its error on them is held out). The summary compares the new model with the
default calibration (what autopar uses without `--calibration`) on those runs:

- how far they measured from the analytical prediction (median measured / predicted);
- the factor the fit applies for your cluster (the cluster part of its correction at your runs: the group's
  offset, or the adapter's posterior offset and slopes), and the 80% band at your runs, before and after;
- the held-out error on your runs: each run predicted by the model refitted without it (its penalty, shrink
  and offset-prior strength kept as the fit chose them: the selection itself is not redone), against the
  default calibration's prediction. A fit that predicts your held-out runs worse than the default is
  `worse`: `calibrate fit` says so, and replaces an existing model file with it only under --force;
- runs far off the analytical prediction (records/plausibility.py FAR_OFF_FACTOR), one warning line each.

The memory margin (search/margin.py, a layer above this one) is compared by the CLI and handed in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from autopar.calibration.models.adapter import AdaptedCorrector
from autopar.calibration.models.features import FEATURE_NAMES, TrainingSet
from autopar.calibration.records.plausibility import far_off_warning, is_far_off

# "No worse" is exact, as in the validation gate (validation.GATE_TOLERANCE; not imported: that module
# needs SciPy, and a summary of a fit without your runs needs no refit).
NO_WORSE_TOLERANCE = 1e-9


def half_width_pct(low: float, high: float) -> float:
    """A band's half-width as a percentage of its centre (geometric: the band is symmetric in log)."""
    return 100 * math.expm1(0.5 * math.log(high / low))


@dataclass(frozen=True)
class MarginChange:
    """The memory margin a search uses on one stack, with the default calibration and with the fit."""

    stack: str
    before: str
    after: str
    why: str


@dataclass
class FitSummary:
    """The facts `calibrate fit` states before its tables (numbers from the fit and the default model)."""

    own_runs: int  # your runs the fit used
    group: str | None  # the cluster whose correction every prediction of the model gets
    group_how: str  # why that group (or why none)
    groups_of_own: list[str]  # the groups your runs are in
    measured_vs_predicted: float | None  # median over your runs of measured / analytical prediction
    cluster_factor: float | None  # median over your cluster's runs of the fit's cluster factor
    band_before_pct: float  # median 80% band half-width at your runs: default calibration
    band_after_pct: float  # ... and the fitted model
    shrink_before: float  # the share of the global ridge correction applied (validation's gate): default
    shrink_after: float  # ... and the fitted model
    held_out_runs: int  # your cluster's runs scored held out
    held_out_ape_before: float | None  # median APE of the default calibration on them
    held_out_ape_after: float | None  # median APE of the model refitted without each
    margins: list[MarginChange] = field(default_factory=list)
    far_off: list[str] = field(default_factory=list)  # one warning line per far-off run

    @property
    def worse(self) -> bool:
        """Whether the fit predicts your held-out runs worse than the default calibration."""
        if self.held_out_ape_before is None or self.held_out_ape_after is None:
            return False
        return self.held_out_ape_after > self.held_out_ape_before + NO_WORSE_TOLERANCE

    def held_out_line(self) -> str:
        """One line naming the held-out error on your runs, with this fit and with the default."""
        assert self.held_out_ape_before is not None and self.held_out_ape_after is not None
        return (
            f"held out, your {self.held_out_runs} run(s){_of(self.group)} are predicted within "
            f"{self.held_out_ape_after:.1%} (median error) by this fit, {self.held_out_ape_before:.1%} by the "
            "default calibration"
        )

    def lines(self) -> list[str]:
        """The summary in plain words, one fact a line."""
        if not self.own_runs:
            return [f"no runs of yours in the store: fitted on the published/--data runs ({self.group_how})"]
        out = [self._measured_line(), self._band_line()]
        if self.shrink_after != self.shrink_before:
            out.append(self._shrink_line())
        out += [_margin_line(m) for m in self.margins]
        if self.held_out_ape_after is not None:
            out.append(self.held_out_line() + (": worse" if self.worse else ""))
        return out

    def _measured_line(self) -> str:
        ratio = self.measured_vs_predicted
        assert ratio is not None
        side = "below" if ratio < 1 else "above"
        text = f"your {self.own_runs} run(s) measured {abs(1 - ratio):.0%} {side} the analytical prediction (median)"
        if self.cluster_factor is None:
            return f"{text}; no cluster correction applied ({self.group_how})"
        return f"{text}; this fit applies x{self.cluster_factor:.2f} for cluster '{self.group}' ({self.group_how})"

    def _band_line(self) -> str:
        return (
            f"80% band at your runs now ±{self.band_after_pct:.1f}% "
            f"(±{self.band_before_pct:.1f}% with the default calibration)"
        )

    def _shrink_line(self) -> str:
        why = "smaller" if self.shrink_after < self.shrink_before else "larger"
        return (
            f"global correction now x{self.shrink_after:.1f} of the ridge (x{self.shrink_before:.1f} in the "
            f"default calibration): with your runs' group(s) among the sources the no-worse gate holds out, it "
            f"passes a {why} share; this moves every cluster's predictions and band"
        )

    def to_json(self) -> dict[str, Any]:
        """The same facts as JSON (`calibrate fit --json`'s `summary`)."""
        doc = asdict(self)
        doc["worse"] = self.worse
        doc["text"] = self.lines()
        return doc


def _of(group: str | None) -> str:
    return f" of '{group}'" if group else ""


def _margin_line(m: MarginChange) -> str:
    if m.before == m.after:
        return f"memory margin on {m.stack} unchanged ({m.after})"
    return f"memory margin on {m.stack} now {m.after} (was {m.before}) because {m.why}"


def own_mask(ts: TrainingSet, own_ids: set[str]) -> np.ndarray:
    """Rows of the training set that are your runs."""
    return np.array([i in own_ids for i in ts.ids], dtype=bool)


def summarize(
    cal: Any,
    default: Any,
    ts: TrainingSet,
    own_ids: set[str],
    group_how: str,
    num_gpus: Mapping[str, Any] | None = None,
) -> FitSummary:
    """The FitSummary of model `cal` fitted on `ts` (your runs: `own_ids`), against model `default`."""
    own = own_mask(ts, own_ids)
    group = cal.meta.group
    mine = own & (np.asarray(ts.groups) == group) if group else own
    at = ts.X[mine] if mine.any() else (ts.X[own] if own.any() else ts.X)
    before, after = _held_out(cal, default, ts, mine)
    return FitSummary(
        own_runs=int(own.sum()),
        group=group,
        group_how=group_how,
        groups_of_own=sorted({g for g, o in zip(ts.groups, own, strict=True) if o}),
        measured_vs_predicted=float(np.median(ts.measured[own] / ts.predicted[own])) if own.any() else None,
        cluster_factor=_cluster_factor(cal, ts.X[mine], group) if group and mine.any() else None,
        band_before_pct=_band_pct(default, at),
        band_after_pct=_band_pct(cal, at),
        shrink_before=float(default.corrector.shrink),
        shrink_after=float(cal.corrector.shrink),
        held_out_runs=int(mine.sum()),
        held_out_ape_before=before,
        held_out_ape_after=after,
        far_off=far_off_lines(ts, own, num_gpus or {}),
    )


def _cluster_factor(cal: Any, X: np.ndarray, group: str) -> float:
    """The factor the fit's cluster part (group offset, or the adapter's offset and slopes) gives the rows."""
    part = cal.corrector.predict(X, [group] * len(X)) - cal.corrector.predict(X)
    return float(np.exp(np.median(part)))


def _band_pct(cal: Any, X: np.ndarray) -> float:
    """Median half-width (%) of a model's 80% throughput band at the rows (its own group applied)."""
    f, lo, hi = cal.bands("throughput", X)
    return float(np.median([half_width_pct(a, b) for a, b in zip(lo, hi, strict=True)]))


def far_off_lines(ts: TrainingSet, own: np.ndarray, num_gpus: Mapping[str, Any]) -> list[str]:
    """plausibility.far_off_warning for each of your runs far off the analytical prediction."""
    return [
        far_off_warning(rid, m, p, num_gpus.get(rid))
        for rid, m, p, o in zip(ts.ids, ts.measured, ts.predicted, own, strict=True)
        if o and is_far_off(m / p)
    ]


def _held_out(cal: Any, default: Any, ts: TrainingSet, rows: np.ndarray) -> tuple[float | None, float | None]:
    """(default's, fit's) median APE on `rows`, each predicted by the fit refitted without it."""
    if not rows.any():
        return None, None
    y = ts.y[rows]
    before = np.abs(np.expm1(default.corrector.predict(ts.X[rows]) - y))
    after = np.abs(np.expm1(held_out_centres(cal, ts, rows) - y))
    return float(np.median(before)), float(np.median(after))


def held_out_centres(cal: Any, ts: TrainingSet, rows: np.ndarray) -> np.ndarray:
    """Log correction of each of `rows` by the fit's model refitted without that run: the global ridge x
    shrink with the fit's penalty, shrink and offset-prior strength, plus its group's part (offset, or the
    adapter's posterior when the fit has one) from the group's other runs; no group: no cluster part."""
    from autopar.calibration.models.corrector import ThroughputCorrector
    from autopar.calibration.models.hierarchy import HierarchicalAdapter, adapter_clusters, slope_columns

    ch, group = cal.meta.choice, cal.meta.group
    adapted = isinstance(cal.corrector, AdaptedCorrector)
    g = np.asarray(ts.groups)
    keys = np.asarray(adapter_clusters(ts.groups, ts.gpus, group))
    out = []
    for i in np.flatnonzero(rows):
        keep = np.arange(len(ts)) != i
        m = ThroughputCorrector(alpha=ch["alpha"], shrink=ch["shrink"], prior_scale=ch["prior_scale"])
        m.fit(ts.X[keep], ts.y[keep], groups=g[keep])
        x = ts.X[i : i + 1]
        if not adapted:
            out.append(float(m.predict(x, None if group is None else [group])[0]))
            continue
        r = ts.y[keep] - m.predict(ts.X[keep])
        h = HierarchicalAdapter(slope_columns(FEATURE_NAMES), calibrate_band=False)
        h.fit(ts.X[keep], r, keys[keep])
        out.append(float(m.predict(x)[0] + h.predict(x, [group])[0]))
    return np.array(out)


def group_names(groups: Sequence[str]) -> str:
    """Groups as a short list for a message."""
    shown = sorted(set(groups))
    return ", ".join(shown[:4]) + (f", +{len(shown) - 4} more" if len(shown) > 4 else "")
