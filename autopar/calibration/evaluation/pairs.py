"""How often the model's comparisons of two layouts held when both were measured (its record on pairs).

A recommender's claim is a comparison: "this layout is X% faster than that one". Its band (the corrector's,
calibration/models/corrector.py) is about one prediction; what a comparison needs is the model's record on
comparisons. The published sweeps in which one team measured several layouts of one problem (same model,
GPUs, sequence, global batch, precision and stack; `bench/data/sweeps.csv`, independent of the
calibration) give it: for every pair of measured layouts of a problem, the gain the analytical model
predicts for the one it calls faster, and the gain that was measured. Grouped by predicted gain
(GAIN_EDGES), each group says how often the predicted-faster layout was measured faster and what gain was
realised. `bench/ranking.py --export-pairs` writes the shipped table (PAIRS_FILE); a test checks it is
current for the model.

`pair_record()` reads the shipped table; `PairRecord.for_gain(ratio)` is the group a predicted ratio
falls in (None below the first edge: the near-tie rule, search/recommend.py NEAR_TIE_FRACTION, covers it).
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

# Predicted-gain groups (pick / other, > 1), fixed in advance at round values (not fitted): a near-tie
# (below 3%), the size of the model's median error on published runs (3-10%), 10-20%, 20-40% and more.
GAIN_EDGES: tuple[float, ...] = (1.03, 1.10, 1.20, 1.40)
# The record holds a comparison when the predicted-faster layout measured faster in at least this share of
# its group's pairs (4 in 5: the 80% level of every band autopar shows).
HOLDS_SHARE = 0.8
# Fewer pairs than this, or pairs from a single source, is too thin a record to lean on.
MIN_PAIRS = 10
# Nor is a group one source dominates: more than this share of its pairs from one source reads as that
# source's record (the 80% level again). Added in issue 21's eighth session, when a second sweep's single
# pair would otherwise have made 86 pairs of one campaign "more than one source".
MAX_SOURCE_SHARE = 0.8
PAIRS_FILE = "pair_record.json"
PAIRS_SCHEMA = 2
# A predicted gain within this of 1 is no prediction of an order (rounding: bench/knob_pairs.py).
_NO_ORDER = 1e-9


@dataclass(frozen=True)
class MeasuredPair:
    """Two measured layouts of one problem: the gain the model predicts for the one it calls faster, and
    the measured gain of that same one over the other (below 1 when the model had the order wrong)."""

    source: str
    problem: str
    predicted_gain: float  # > 1
    measured_gain: float


@dataclass(frozen=True)
class GainGroup:
    """The pairs whose predicted gain lies in [lo, hi): how often the order held and what was realised."""

    lo: float
    hi: float  # math.inf for the last group
    pairs: int
    problems: int
    sources: tuple[str, ...]
    held_share: float  # share of pairs whose predicted-faster layout measured faster
    realised_median: float  # measured gain, median
    realised_low: float  # measured gain, 20th percentile (the pessimistic end of an 80% band)
    largest_source_share: float  # share of the pairs that the group's largest source supplies

    @property
    def broad(self) -> bool:
        """More than one source, none supplying more than MAX_SOURCE_SHARE of the pairs."""
        return len(self.sources) > 1 and self.largest_source_share <= MAX_SOURCE_SHARE

    @property
    def holds(self) -> bool:
        """Whether the record supports a comparison of this size: enough pairs, from more than one source
        with none dominating, with the order held in at least HOLDS_SHARE of them."""
        return self.pairs >= MIN_PAIRS and self.broad and self.held_share >= HOLDS_SHARE

    def span(self) -> str:
        """'20-40%' or 'over 40%' (the predicted gains the group covers)."""
        lo = f"{100 * (self.lo - 1):.0f}"
        return f"over {lo}%" if math.isinf(self.hi) else f"{lo}-{100 * (self.hi - 1):.0f}%"

    def sentence(self) -> str:
        """The record in one sentence, for the recipe comparison."""
        sources = len(self.sources)
        where = f"{self.problems} problem{'s' * (self.problems > 1)}, {sources} source{'s' * (sources > 1)}"
        held = round(self.held_share * self.pairs)
        text = (
            f"Of {self.pairs} measured layout pairs ({where}; bench/ranking.py) that the model separated by "
            f"{self.span()}, the one it predicted faster measured faster in {held} (realised gain median "
            f"{100 * (self.realised_median - 1):+.0f}%, 20th percentile {100 * (self.realised_low - 1):+.0f}%)"
        )
        if self.holds:
            return text + "."
        if self.held_share < HOLDS_SHARE:
            why = f"the order held in only {100 * self.held_share:.0f}% of them"
        else:
            why = "too thin a record to lean on (" + self._thin() + ")"
        return f"{text}: {why}, so this gain is a claim to verify by measuring both, not a result."

    def _thin(self) -> str:
        if len(self.sources) == 1:
            return "one source"
        if not self.broad:
            return f"{100 * self.largest_source_share:.0f}% of the pairs from one source"
        return "few pairs"


def orient(
    source: str, problem: str, pred_a: float, pred_b: float, meas_a: float, meas_b: float
) -> MeasuredPair | None:
    """The pair as the model orders it (None when it predicts no order)."""
    if not all(v > 0 for v in (pred_a, pred_b, meas_a, meas_b)):
        return None
    gain = pred_a / pred_b
    if abs(gain - 1.0) <= _NO_ORDER:
        return None
    if gain > 1:
        return MeasuredPair(source, problem, gain, meas_a / meas_b)
    return MeasuredPair(source, problem, 1.0 / gain, meas_b / meas_a)


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile q of a non-empty sequence."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    i = int(pos)
    j = min(i + 1, len(s) - 1)
    return s[i] + (s[j] - s[i]) * (pos - i)


def group_pairs(pairs: Sequence[MeasuredPair], edges: Sequence[float] = GAIN_EDGES) -> list[GainGroup]:
    """One GainGroup per interval [edges[k], edges[k+1]) (the last open-ended) that has pairs; pairs below
    the first edge are near-ties and form no group."""
    bounds = [*edges, math.inf]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        g = [p for p in pairs if lo <= p.predicted_gain < hi]
        if not g:
            continue
        realised = [p.measured_gain for p in g]
        per_source = Counter(p.source for p in g)
        out.append(
            GainGroup(
                lo=lo,
                hi=hi,
                pairs=len(g),
                problems=len({(p.source, p.problem) for p in g}),
                sources=tuple(sorted({p.source for p in g})),
                held_share=sum(r > 1.0 for r in realised) / len(g),
                realised_median=statistics.median(realised),
                realised_low=quantile(realised, 0.2),
                largest_source_share=max(per_source.values()) / len(g),
            )
        )
    return out


@dataclass(frozen=True)
class PairRecord:
    """The shipped record: groups by predicted gain, and where the pairs came from."""

    groups: tuple[GainGroup, ...]
    data: str  # the sweep file the pairs came from

    def for_gain(self, ratio: float) -> GainGroup | None:
        """The group of a predicted gain (ratio > 1; a ratio < 1 is read as the other order), None when
        it is a near-tie or no group covers it."""
        gain = ratio if ratio >= 1 else 1.0 / ratio
        return next((g for g in self.groups if g.lo <= gain < g.hi), None)


def record_document(groups: Sequence[GainGroup], data: str) -> dict:
    """The JSON document of PAIRS_FILE (math.inf written as null)."""
    rows = []
    for g in groups:
        row = asdict(g)
        row["hi"] = None if math.isinf(g.hi) else g.hi
        row["sources"] = list(g.sources)
        rows.append({k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()})
    return {"schema": PAIRS_SCHEMA, "data": data, "edges": list(GAIN_EDGES), "groups": rows}


def from_document(doc: dict) -> PairRecord:
    """A PairRecord from its JSON document (ValueError when the schema or edges are not this module's)."""
    if doc.get("schema") != PAIRS_SCHEMA or tuple(doc.get("edges", ())) != GAIN_EDGES:
        raise ValueError(
            f"{PAIRS_FILE}: schema or gain edges differ from autopar.calibration.evaluation.pairs"
        )
    groups = []
    for row in doc["groups"]:
        hi = math.inf if row["hi"] is None else float(row["hi"])
        groups.append(GainGroup(**{**row, "hi": hi, "sources": tuple(row["sources"])}))
    return PairRecord(tuple(groups), str(doc.get("data", "")))


@functools.cache
def pair_record() -> PairRecord | None:
    """The shipped record (None when the file is missing or unreadable: comparisons then say nothing)."""
    from autopar.data import data_path

    try:
        return from_document(json.loads(data_path(PAIRS_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
