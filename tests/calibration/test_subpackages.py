"""autopar/calibration/ regrouped by subject (issue 48 item 2): subpackages in one order, no module over 450
lines, and every fitted model on one base (models/base.py) with the prediction formula unchanged."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest
from docs_pages import page_text
from test_imports import GRAPH

from autopar.calibration.models.adapter import AdaptedCorrector, FittedAdapter
from autopar.calibration.models.base import FittedModel
from autopar.calibration.models.predictor import FittedCorrector

CALIBRATION = Path(__file__).resolve().parents[2] / "autopar" / "calibration"
# Lowest first: a subpackage imports only those before it (docs/layout.md says so in this order).
SUBPACKAGES = ("records", "store", "ingest", "planning", "models", "evaluation", "apply")
MAX_MODULE_LINES = 450


def _subpackage(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "calibration" else None


def test_subpackages_import_only_those_before_them():
    rank = {name: i for i, name in enumerate(SUBPACKAGES)}
    upward = [
        f"{a} -> {b}"
        for a, deps in GRAPH.items()
        if (sa := _subpackage(a)) is not None
        for b in deps
        if (sb := _subpackage(b)) is not None and rank[sb] > rank[sa]
    ]
    assert upward == []


def test_every_module_is_in_a_subpackage_the_layout_names():
    found = {p.parent.name for p in CALIBRATION.rglob("*.py")} - {"calibration"}
    assert found == set(SUBPACKAGES)
    line = " ".join(page_text("layout.md").split())
    positions = [line.index(f"{name}/ (") for name in SUBPACKAGES]
    assert positions == sorted(positions), "docs/layout.md must list the subpackages lowest first"


def test_no_module_over_450_lines():
    long = {
        p.relative_to(CALIBRATION).as_posix(): n
        for p in CALIBRATION.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_the_fitted_models_share_one_base():
    assert issubclass(FittedCorrector, FittedModel) and issubclass(FittedAdapter, FittedModel)
    assert inspect.isabstract(FittedModel)
    for cls in (FittedCorrector, AdaptedCorrector, FittedAdapter):
        assert not inspect.isabstract(cls), cls


def _corrector() -> FittedCorrector:
    """One feature trained on [0, 1]: mean 0.5, sd 0.5, coefficient 0.2 per sd, intercept 0.1, shrink 0.5,
    group 'a' offset 0.05, band (-0.1, 0.1) and the analytical band (-0.3, 0.4) (all logs)."""
    params = {
        "alpha": 1.0,
        "shrink": 0.5,
        "coverage": 0.8,
        "backfit_iter": 4,
        "prior_scale": 1.0,
        "lo": [0.0],
        "hi": [1.0],
        "mean": [0.5],
        "scale": [0.5],
        "coef": [0.2],
        "intercept": 0.1,
        "offsets": {"a": 0.05},
        "tau": 2.0,
        "band": [-0.1, 0.1],
        "prior_band": [-0.3, 0.4],
    }
    return FittedCorrector.from_params(params, 1)


def test_corrector_interval_by_hand():
    m = _corrector()
    # x = 1: z = (1 - 0.5) / 0.5 = 1; global = 0.5 * (0.2 * 1 + 0.1) = 0.15; group a adds 0.05 -> 0.20,
    # band 0.20 - 0.1 = 0.10 to 0.20 + 0.1 = 0.30 (inside the training range: no analytical band).
    c, lo, hi = m.predict_interval(np.array([[1.0]]), ["a"])
    assert (c[0], lo[0], hi[0]) == pytest.approx((0.20, 0.10, 0.30))
    # x = 2 extrapolates (beyond 1 + 5% of the range) and is clipped to 1: global 0.15, no group; the band
    # widens to the analytical one: low min(0.05, -0.3) = -0.3, high max(0.25, 0.4) = 0.4.
    c, lo, hi = m.predict_interval(np.array([[2.0]]))
    assert (c[0], lo[0], hi[0]) == pytest.approx((0.15, -0.30, 0.40))


def test_adapted_corrector_interval_by_hand():
    m = AdaptedCorrector.from_params(_corrector().to_params(), 1)
    # An adapter with a cluster 'c' whose offset is 0.1 and slope 0: prior variances v = (0.01, 0.01), run
    # variance 0.04; band quantiles -1 to +1 predictive sds; cluster c's posterior covariance 0 and s2 0.04.
    m.adapter_ = FittedAdapter.from_params(
        {
            "slope_idx": [0],
            "v": [0.01, 0.01],
            "s2w": 0.04,
            "band": [-1.0, 1.0],
            "band_seen": [-1.0, 1.0],
            "posteriors": {"c": {"mean": [0.1, 0.0], "cov": [[0.0, 0.0], [0.0, 0.0]], "s2": 0.04}},
        },
        1,
    )
    # x = 1 in cluster c: global 0.15 + 0.1 = 0.25; sd = sqrt(0 + 0.04) = 0.2 -> band 0.05 to 0.45.
    c, lo, hi = m.predict_interval(np.array([[1.0]]), ["c"])
    assert (c[0], lo[0], hi[0]) == pytest.approx((0.25, 0.05, 0.45))
    # x = 1 in an unseen cluster: global 0.15; sd = sqrt(1*0.01 + 1*0.01 + 0.04) = sqrt(0.06).
    c, lo, hi = m.predict_interval(np.array([[1.0]]), ["new"])
    sd = 0.06**0.5
    assert (c[0], lo[0], hi[0]) == pytest.approx((0.15, 0.15 - sd, 0.15 + sd))
