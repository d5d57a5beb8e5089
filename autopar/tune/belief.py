"""What `autopar tune` believes about each candidate's throughput and memory, before and after measured runs.

Throughput. y_i = log(measured tokens/s per GPU / prior prediction) of candidate i. Before any run, y is the
sum of a cluster offset b, common to every candidate of this cluster and stack (sd `offset_sd`), and a part
u_i of the layout's own (sd `config_sd`), alike for layouts a few knob steps apart:
cov(u_i, u_j) = config_sd^2 exp(-d_ij^2 / 2 L^2), with d_ij the distance of their knob vectors
(`knob_vector`: a doubling of a degree or of the micro-batch is one step) and L = `LENGTH_SCALE`. A short
run measures y with noise `noise_sd`. This is a Gaussian process with a fixed kernel: scikit-learn's
`GaussianProcessRegressor` with kernel ConstantKernel(offset_sd^2) + ConstantKernel(config_sd^2) * RBF(L),
alpha = noise_sd^2 and no hyperparameter fit (a handful of runs cannot fit a kernel; the kernel is the
prior). Its two sizes are measured, not chosen: offset_sd is the calibration's own 80% band for this
problem (`prior_from_bands`: how far the whole cluster may sit from the model), config_sd the spread of
log(measured / predicted) between the layouts of one problem in published sweeps, after each problem's own
offset is taken out (`within_problem_sd`, autopar/data/tune_prior.json, written by
`python bench/tune_replay.py --export` from sources no calibration saw). The calibration's band is narrower
than that on sources it never saw (its 80% band held 41% of their runs, issue 42), and a tune that believed
it would stop before the layout the model misplaces.

Memory. r_i = log(measured peak / predicted peak) = c + v_i, with c common to the cluster's stack
(allocator, framework buffers) and v_i the layout's own, independent, each carrying half the variance of
the memory band (`MEMORY_OFFSET_SHARE`). Evidence: a measured peak (Gaussian in c), a run that ran without
a stated peak (it fitted: r_j < log(capacity / predicted_j)), an out-of-memory run (r_j above that). The
posterior of c is computed on a grid (exact for one dimension); a candidate's probability to fit is
P(c + v_i < log(capacity / predicted_i)). A measured OOM is hard evidence about its own candidate: it is
never run again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autopar.calibration.planning.plan import LENGTH_SCALE, NOISE_SD, Z80

# The prior when no calibration band is available (--no-calibration): the analytical model's error on sources
# it never saw, x1.2 optimistic in the median with 80% bands that held 41% of the runs (issue 42's figures):
# a log sd of 0.25 puts x0.73-x1.38 inside the 80% band, and the common offset learns the bias on the first run.
UNCALIBRATED_SD = 0.25
UNCALIBRATED_MEMORY_SD = (
    0.10  # peak-memory log sd without a calibration (the memory band of issue 44 is wider)
)
TUNE_PRIOR_FILE = "tune_prior.json"
MEMORY_OFFSET_SHARE = 0.5  # share of the memory variance common to the cluster's stack (not measured apart)
_GRID = np.linspace(-2.0, 2.0, 801)  # the memory offset c, log units


@dataclass(frozen=True)
class Prior:
    """The throughput kernel's parameters (log units) and the memory prior."""

    offset_sd: float
    config_sd: float
    length: float = LENGTH_SCALE
    noise_sd: float = NOISE_SD
    memory_sd: float = UNCALIBRATED_MEMORY_SD
    # How far this problem's layout spread may sit from config_sd (log sd of config_sd itself; 0: known exactly).
    config_log_sd: float = 0.0


def band_sd(lo: float, hi: float) -> float:
    """The log sd of an 80% band (lo, hi); NaN when it has no width."""
    if not (lo > 0 and hi > lo and math.isfinite(hi)):
        return math.nan
    return math.log(hi / lo) / (2 * Z80)


def _tune_prior() -> dict[str, Any]:
    import json

    from autopar.data import data_path

    doc: dict[str, Any] = json.loads(data_path(TUNE_PRIOR_FILE).read_text(encoding="utf-8"))
    return doc


def within_problem_sd() -> float:
    """The layout part of the prior (log sd), as measured on published sweeps (autopar/data/tune_prior.json)."""
    return float(_tune_prior()["within_problem_sd"])


def between_sources_log_sd() -> float:
    """How much the layout spread differs from one source to the next: the sd of log(within-problem sd) over
    the sources of autopar/data/tune_prior.json (each a team, stack and cluster of its own). A problem's own
    spread is as uncertain as that before its runs say more."""
    sds = [float(v["within_problem_sd"]) for v in _tune_prior()["by_source"].values()]
    logs = np.log([x for x in sds if x > 0])
    return float(np.std(logs, ddof=1)) if len(logs) > 1 else 0.0


def prior_from_bands(
    throughput_sds: Sequence[float], memory_sds: Sequence[float], config_sd: float | None = None
) -> Prior:
    """The prior from the candidates' 80% bands (median log sd, the offset part; UNCALIBRATED_* where none
    has one) and the layouts' own spread `config_sd` (default: `within_problem_sd`)."""
    tps = [s for s in throughput_sds if math.isfinite(s) and s > 0]
    mem = [s for s in memory_sds if math.isfinite(s) and s > 0]
    between = float(np.median(tps)) if tps else UNCALIBRATED_SD
    config = max(within_problem_sd() if config_sd is None else config_sd, NOISE_SD)
    return Prior(
        offset_sd=between,
        config_sd=config,
        memory_sd=float(np.median(mem)) if mem else UNCALIBRATED_MEMORY_SD,
        config_log_sd=between_sources_log_sd(),
    )


def _gp(prior: Prior):  # noqa: ANN202 - sklearn type, imported lazily
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    kernel = ConstantKernel(prior.offset_sd**2, "fixed") + ConstantKernel(prior.config_sd**2, "fixed") * RBF(
        prior.length, "fixed"
    )
    return GaussianProcessRegressor(kernel=kernel, alpha=prior.noise_sd**2, optimizer=None, normalize_y=False)


def throughput_posterior(
    prior: Prior, z: np.ndarray, measured_idx: Sequence[int], y: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """(mean, sd) of y at every candidate (rows of `z`) given the measured y at `measured_idx`.

    The layout spread config_sd is itself uncertain (`Prior.config_log_sd`): the posterior averages the GPs of
    a grid of config_sd values (log-normal around `prior.config_sd`), each weighted by its prior density times
    the marginal likelihood of the runs (Bayesian model averaging). Runs that sit close to the model after the
    common offset make the small spreads likelier, so the tune stops exploring layouts the model already ranks
    well; runs that scatter make the large spreads likelier."""
    z = np.asarray(z, float)
    if not len(measured_idx):
        sd = math.sqrt(prior.offset_sd**2 + prior.config_sd**2)
        return np.zeros(len(z)), np.full(len(z), sd)
    zs, ys = z[list(measured_idx)], np.asarray(y, float)
    grid, log_w = _config_grid(prior)
    preds = []
    for i, config_sd in enumerate(grid):
        gp = _gp(replace(prior, config_sd=float(config_sd))).fit(zs, ys)
        log_w[i] += gp.log_marginal_likelihood_value_
        preds.append(gp.predict(z, return_std=True))
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    means = np.array([m for m, _ in preds])
    second = np.array([sd**2 + m**2 for m, sd in preds])
    mean = w @ means
    var = np.maximum(w @ second - mean**2, 0.0)
    return np.asarray(mean, float), np.maximum(np.sqrt(var), 1e-9)


CONFIG_GRID_POINTS = 9  # config_sd values averaged, spanning +-2 of config_log_sd


def _config_grid(prior: Prior) -> tuple[np.ndarray, np.ndarray]:
    """(config_sd values, log prior weights): log-normal around prior.config_sd, no lower than the run noise;
    one point when the spread is known exactly."""
    if prior.config_log_sd <= 0:
        return np.array([prior.config_sd]), np.zeros(1)
    k = np.linspace(-2.0, 2.0, CONFIG_GRID_POINTS)
    grid = np.maximum(prior.config_sd * np.exp(k * prior.config_log_sd), prior.noise_sd)
    return grid, -0.5 * k**2


@dataclass(frozen=True)
class MemoryEvidence:
    """One run's memory evidence: log(capacity / predicted peak) of its candidate, and what it showed."""

    log_room: float  # log(usable capacity / predicted peak)
    outcome: str  # "peak" (measured peak given), "fit" (it ran), "oom"
    log_ratio: float = math.nan  # log(measured peak / predicted peak), for "peak"


def _norm_cdf(x: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr

    return np.asarray(ndtr(x), float)


def memory_offset_posterior(prior: Prior, evidence: Sequence[MemoryEvidence]) -> np.ndarray:
    """The posterior weights of the common memory offset c on `_GRID` (they sum to 1)."""
    c_sd = prior.memory_sd * math.sqrt(MEMORY_OFFSET_SHARE)
    v_sd = prior.memory_sd * math.sqrt(1 - MEMORY_OFFSET_SHARE)
    logp = -0.5 * (_GRID / c_sd) ** 2
    for e in evidence:
        if e.outcome == "peak" and math.isfinite(e.log_ratio):
            logp = logp - 0.5 * ((e.log_ratio - _GRID) / v_sd) ** 2
        elif e.outcome == "fit":
            logp = logp + np.log(np.maximum(_norm_cdf((e.log_room - _GRID) / v_sd), 1e-300))
        elif e.outcome == "oom":
            logp = logp + np.log(np.maximum(_norm_cdf((_GRID - e.log_room) / v_sd), 1e-300))
    w = np.exp(logp - logp.max())
    return w / w.sum()


def fit_probability(prior: Prior, evidence: Sequence[MemoryEvidence], log_rooms: np.ndarray) -> np.ndarray:
    """P(candidate fits) for each log(capacity / predicted peak) in `log_rooms`."""
    w = memory_offset_posterior(prior, evidence)
    v_sd = prior.memory_sd * math.sqrt(1 - MEMORY_OFFSET_SHARE)
    rooms = np.asarray(log_rooms, float)
    return _norm_cdf((rooms[:, None] - _GRID[None, :]) / v_sd) @ w
