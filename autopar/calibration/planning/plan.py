"""Active calibration: the few short profiling runs on the user's cluster that most shrink the uncertainty
of the current recommendation (`autopar calibrate plan`). Pure: numbers in, numbers out.

What the cluster will measure (a Gaussian model on y = log(measured / predicted tokens/s per GPU)):
- y_i = b + u_i for candidate configuration i. b is the cluster's offset, common to every configuration of
  the cluster (sd `offset_sd`); u_i is what is specific to the configuration (sd `config_sd`), and
  configurations with similar features deviate alike: cov(u_i, u_j) = config_sd^2 exp(-d_ij^2 / 2 L^2), with
  d_ij the distance of their standardised feature vectors (the corrector's standardisation) and
  L = `LENGTH_SCALE`. A short run measures y with noise `noise_sd`.
- `prior_from_model` splits the calibration model's 80% band for a cluster it never saw (its out-of-source
  conformal band) into the two parts: offset_sd is the spread of the clusters' learned offsets, config_sd
  the rest. Runs already measured on this cluster condition the model (Gaussian-process posterior); the
  80% band of a candidate is its posterior mean +- Z80 posterior sd.

The criterion (expected reduction of the decision's uncertainty). Two things make the recommendation
uncertain: the band of the pick itself (how fast will it really be?) and the chance that another
candidate is in fact faster (which one is best?). With the pick p (highest posterior mean) and the
posterior before the new runs, the decision uncertainty is

    D = Var(y_p) + sum_{i != p} w_i Var(y_i - y_p),   w_i = 2 Phi(-|m_i - m_p| / sd(y_i - y_p))

where w_i is the probability mass of the pair's overlap: 1 when the two bands sit on each other, ~0 when
they are far apart. A common offset b cancels in y_i - y_p, so measuring a run that shares features with
many candidates (small d) helps every pair, and measuring one of an overlapping pair resolves that pair.
For a Gaussian model the posterior variances after a run do not depend on the value it will measure, so
D after a set of runs is known before running them: `propose` adds, greedily, the candidate run that
lowers D most, and stops at `max_runs` or when the next run would remove less than `MIN_GAIN` of D or
less than one measurement's noise variance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Z80 = 1.2815515655446004  # standard normal 90th percentile: an 80% band is mean +- Z80 sd
# Two configurations one public-run standard deviation apart on one feature correlate 0.88, two apart
# 0.61: neighbours in the layout space (TP2 vs TP4 of one model) share most of their deviation.
LENGTH_SCALE = 2.0
# Log-noise of one short run's median: step-time jitter (~2% CV) over SHORT_RUN_MEASURED steps gives
# 1.2533 * 2% / sqrt(20) = 0.56% for the median, plus run-to-run variation of about 1% (job placement).
NOISE_SD = 0.012
# A run that would remove less than this fraction of the decision uncertainty, or less than one
# measurement's own noise variance (NOISE_SD^2), is not worth a job.
MIN_GAIN = 0.05
# Short-run length: steps skipped (first steps pay for compilation, NCCL communicator set-up and the
# allocator's growth) and steps measured after them (see NOISE_SD).
SHORT_RUN_WARMUP = 10
SHORT_RUN_MEASURED = 20


@dataclass(frozen=True)
class Prior:
    """The Gaussian model's parameters (log units)."""

    offset_sd: float
    config_sd: float
    length: float = LENGTH_SCALE
    noise_sd: float = NOISE_SD


@dataclass(frozen=True)
class Proposal:
    """One proposed run: candidate index, the decision uncertainty D and the pick's 80% band half-width
    (log) once this run and the ones before it are measured."""

    index: int
    uncertainty_after: float
    pick_halfwidth_after: float


def prior_from_model(band: tuple[float, float], offsets: Sequence[float]) -> Prior:
    """Split the model's unseen-cluster 80% band (log low, log high) into offset and configuration parts."""
    total = (band[1] - band[0]) / (2 * Z80)
    if not (math.isfinite(total) and total > 0):
        raise ValueError(f"the calibration band {band} has no width")
    offs = np.asarray(list(offsets), float)
    between = float(np.std(offs, ddof=1)) if len(offs) >= 2 else 0.0
    between = min(between, total)
    return Prior(offset_sd=between, config_sd=math.sqrt(max(total**2 - between**2, NOISE_SD**2)))


def covariance(za: np.ndarray, zb: np.ndarray, prior: Prior) -> np.ndarray:
    """Prior covariance of y between two sets of standardised feature rows."""
    d2 = ((za[:, None, :] - zb[None, :, :]) ** 2).sum(axis=2)
    return prior.offset_sd**2 + prior.config_sd**2 * np.exp(-d2 / (2 * prior.length**2))


def posterior(
    z: np.ndarray, obs_z: np.ndarray, obs_y: np.ndarray, prior: Prior
) -> tuple[np.ndarray, np.ndarray]:
    """(mean, covariance) of y at the candidates `z` given measured y at `obs_z` (none: the prior)."""
    k = covariance(z, z, prior)
    if len(obs_z) == 0:
        return np.zeros(len(z)), k
    koo = covariance(obs_z, obs_z, prior) + prior.noise_sd**2 * np.eye(len(obs_z))
    kco = covariance(z, obs_z, prior)
    sol = np.linalg.solve(koo, kco.T)
    return sol.T @ np.asarray(obs_y, float), k - kco @ sol


def _pair_weights(center: np.ndarray, cov: np.ndarray, pick: int) -> np.ndarray:
    """w_i = 2 Phi(-|m_i - m_p| / sd(y_i - y_p)) (the pick's own weight 0)."""
    var = np.diag(cov) + cov[pick, pick] - 2 * cov[:, pick]
    sd = np.sqrt(np.maximum(var, 1e-18))
    w = np.array(
        [math.erfc(abs(c - center[pick]) / s / math.sqrt(2)) for c, s in zip(center, sd, strict=True)]
    )
    w[pick] = 0.0
    return w


def decision_uncertainty(cov: np.ndarray, pick: int, weights: np.ndarray) -> float:
    """D = Var(y_p) + sum_i w_i Var(y_i - y_p)."""
    var_diff = np.diag(cov) + cov[pick, pick] - 2 * cov[:, pick]
    return float(cov[pick, pick] + weights @ var_diff)


def condition(cov: np.ndarray, runs: Sequence[int], noise_sd: float) -> np.ndarray:
    """The candidates' covariance after measuring y at candidates `runs` (values not needed)."""
    if not runs:
        return cov
    idx = list(runs)
    kss = cov[np.ix_(idx, idx)] + noise_sd**2 * np.eye(len(idx))
    kcs = cov[:, idx]
    return cov - kcs @ np.linalg.solve(kss, kcs.T)


def propose(
    log_pred: np.ndarray, mean: np.ndarray, cov: np.ndarray, prior: Prior, max_runs: int
) -> list[Proposal]:
    """Greedy runs among the candidates that lower the decision uncertainty D most (see the module)."""
    center = np.asarray(log_pred, float) + mean
    pick = int(np.argmax(center))
    w = _pair_weights(center, cov, pick)
    chosen: list[int] = []
    d_now = decision_uncertainty(cov, pick, w)
    out: list[Proposal] = []
    while len(chosen) < max_runs:
        trials = [
            (decision_uncertainty(condition(cov, [*chosen, i], prior.noise_sd), pick, w), i)
            for i in range(len(center))
            if i not in chosen
        ]
        if not trials:
            break
        d_next, best = min(trials)
        if d_now - d_next < max(MIN_GAIN * d_now, prior.noise_sd**2):
            break
        chosen.append(best)
        after = condition(cov, chosen, prior.noise_sd)
        out.append(Proposal(best, d_next, Z80 * math.sqrt(max(after[pick, pick], 0.0))))
        d_now = d_next
    return out


def short_run_steps(step_s: float) -> tuple[int, float]:
    """(steps, seconds) of a short profiling run of a configuration whose step takes `step_s`."""
    steps = SHORT_RUN_WARMUP + SHORT_RUN_MEASURED
    return steps, steps * step_s
