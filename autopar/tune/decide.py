"""Which candidate `autopar tune` runs next, and when it stops. Pure: numbers in, numbers out.

Each unmeasured candidate i has a log-normal belief about its tokens/s per GPU, x_i ~ exp(N(m_i, s_i^2))
(autopar/tune/belief.py), a probability to fit in memory f_i, a GPU count n_i and a price p_i (USD per
GPU-hour). Its objectives are the cluster's tokens/s T = n_i x_i (maximised) and tokens per dollar
E = x_i / p_i (maximised; $/Mtoken = 1e6 / (3600 E)).

Next run (constrained expected improvement, Gardner et al., ICML 2014: the improvement weighted by the
probability that the candidate is feasible, here that it fits):
- one cluster (every candidate has the same GPU type and count): f_i * EI_i, EI_i = E[max(0, x_i - best)],
  best = the best measured tokens/s per GPU, in closed form for a log-normal;
- several clusters (the GPU count or type varies): f_i * EHVI_i, the expected gain in the hypervolume of
  the measured (T, E) front with the origin as reference, by Gauss-Hermite quadrature over x_i (one
  uncertain number per candidate, so the expectation is one-dimensional).
Before any run has measured a throughput, the candidate with the highest believed median among those more
likely to fit than not (else the likeliest to fit).

The stop rule: candidate i could still beat the measured front by more than the noise `noise` when
(T_i, E_i) / (1 + noise) is dominated by no measured point, that is when x_i > t_i with
t_i = (1 + noise) max_j min(T_j / n_i, p_i E_j); with one cluster t_i = (1 + noise) best. The chance of that,
P_i = f_i P(x_i > t_i), is below `p_stop` for every unmeasured candidate: stop ("confident").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

DEFAULT_STOP_PROBABILITY = 0.05  # issue 42: stop when no candidate has more than 5% chance to win
DEFAULT_NOISE = 0.01  # ... by more than the run-to-run noise, 1%
_HERMITE = np.polynomial.hermite_e.hermegauss(32)  # nodes and weights for E[g(Z)], Z ~ N(0, 1)


@dataclass(frozen=True)
class Beliefs:
    """The unmeasured candidates' beliefs (arrays of one length)."""

    mean: np.ndarray  # m_i: log tokens/s per GPU
    sd: np.ndarray  # s_i
    fit: np.ndarray  # f_i
    gpus: np.ndarray  # n_i
    price: np.ndarray  # p_i, USD per GPU-hour


@dataclass(frozen=True)
class Measured:
    """The measured successful runs: tokens/s per GPU, GPU count and price of each."""

    x: np.ndarray
    gpus: np.ndarray
    price: np.ndarray

    @property
    def points(self) -> np.ndarray:
        """(T, E) of each measured run."""
        return np.column_stack([self.gpus * self.x, self.x / self.price])


def single_cluster(b: Beliefs, m: Measured) -> bool:
    """True when every candidate and run shares one GPU count and price (one objective)."""
    return len(np.unique(np.r_[b.gpus, m.gpus])) <= 1 and len(np.unique(np.r_[b.price, m.price])) <= 1


def expected_improvement(mean: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    """E[max(0, x - best)] for x = exp(N(mean, sd^2))."""
    d2 = (mean - math.log(best)) / sd
    return np.exp(mean + sd**2 / 2) * ndtr(d2 + sd) - best * ndtr(d2)


def hypervolume2(points: np.ndarray) -> float:
    """Area dominated by `points` (both objectives maximised) above the origin."""
    pts = points[np.all(points > 0, axis=1)]
    if not len(pts):
        return 0.0
    pts = pts[np.argsort(-pts[:, 0])]
    area, top = 0.0, 0.0
    for t, e in pts:
        if e > top:
            area += t * (e - top)
            top = e
    return area


def expected_hv_improvement(b: Beliefs, m: Measured) -> np.ndarray:
    """E[HV(front + candidate) - HV(front)] for each candidate (Gauss-Hermite over its log-normal x)."""
    front = m.points
    base = hypervolume2(front)
    nodes, weights = _HERMITE
    weights = weights / weights.sum()
    out = np.zeros(len(b.mean))
    for i in range(len(b.mean)):
        xs = np.exp(b.mean[i] + b.sd[i] * nodes)
        gains = [hypervolume2(np.vstack([front, [b.gpus[i] * x, x / b.price[i]]])) - base for x in xs]
        out[i] = float(np.dot(weights, gains))
    return out


def thresholds(b: Beliefs, m: Measured, noise: float) -> np.ndarray:
    """t_i: the tokens/s per GPU candidate i must exceed to beat the measured front by more than `noise`."""
    if not len(m.x):
        return np.zeros(len(b.mean))
    T, E = m.points[:, 0], m.points[:, 1]
    per = np.minimum(T[None, :] / b.gpus[:, None], b.price[:, None] * E[None, :])
    return (1 + noise) * per.max(axis=1)


def win_probability(b: Beliefs, m: Measured, noise: float) -> np.ndarray:
    """P_i = f_i P(x_i > t_i): the chance that candidate i fits and beats the measured front by > noise."""
    t = thresholds(b, m, noise)
    with np.errstate(divide="ignore"):
        z = (b.mean - np.log(np.maximum(t, 1e-300))) / b.sd
    return b.fit * ndtr(z)


def acquisition(b: Beliefs, m: Measured) -> np.ndarray:
    """The score of running each candidate next (higher is better)."""
    if not len(m.x):
        likely = b.fit > 0.5
        return np.where(likely, b.mean, -np.inf) if likely.any() else b.fit
    if single_cluster(b, m):
        return b.fit * expected_improvement(b.mean, b.sd, float(m.x.max()))
    return b.fit * expected_hv_improvement(b, m)


def next_index(b: Beliefs, m: Measured) -> int:
    """The candidate to run next (ties: the first, i.e. the caller's order)."""
    return int(np.argmax(acquisition(b, m)))


def confident(b: Beliefs, m: Measured, p_stop: float, noise: float) -> bool:
    """True when a run has measured a throughput and no candidate's win probability exceeds `p_stop`."""
    if not len(m.x):
        return False
    return not len(b.mean) or bool(win_probability(b, m, noise).max() <= p_stop)


def measured_front(m: Measured) -> list[int]:
    """Indices of the measured runs on the (T, E) front (the best tokens/s per GPU with one cluster)."""
    pts = m.points
    keep = []
    for i, p in enumerate(pts):
        dominated = np.any(np.all(pts >= p, axis=1) & np.any(pts > p, axis=1))
        if not dominated:
            keep.append(i)
    return keep


def as_measured(x: Sequence[float], gpus: Sequence[float], price: Sequence[float]) -> Measured:
    """A Measured from plain lists."""
    return Measured(np.asarray(x, float), np.asarray(gpus, float), np.asarray(price, float))
