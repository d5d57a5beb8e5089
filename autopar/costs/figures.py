"""Money and time from throughput: $/hour, $/Mtoken, time and cost to train a token budget.

Pure functions. With cluster throughput T (tokens/s, as estimated), N GPUs at price p (USD per
GPU-hour) and goodput g (0 < g <= 1, the fraction of wall-clock time spent making progress, i.e.
after restarts, failures, checkpoint stalls):

    usd_per_hour    = N * p                         (you pay for every wall-clock hour)
    effective T     = T * g
    usd_per_mtoken  = usd_per_hour / 3600 / (T * g) * 1e6
    time_to_train_s = tokens / (T * g)
    total_cost_usd  = usd_per_hour * time_to_train_s / 3600
    gpu_hours       = N * time_to_train_s / 3600
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from autopar.errors import SpecError
from autopar.units import (
    SECONDS_PER_DAY,
    SECONDS_PER_HOUR,
    format_duration,
    format_duration_short,
    format_tokens,
    parse_count,
    parse_duration,
    parse_tokens,
    usd_per_mtoken,
)

__all__ = [
    "SECONDS_PER_DAY",
    "SECONDS_PER_HOUR",
    "CostFigures",
    "check_goodput",
    "cost_figures",
    "format_duration",
    "format_duration_short",
    "format_tokens",
    "format_usd",
    "format_usd_short",
    "parse_duration",
    "parse_tokens",
    "parse_usd",
]


@dataclass(frozen=True)
class CostFigures:
    """Cost and time figures of one cluster running one strategy (goodput already applied)."""

    num_gpus: int
    usd_per_gpu_hour: float
    tokens_per_s: float  # estimated cluster throughput, before goodput
    goodput: float  # 0 < g <= 1
    usd_per_hour: float  # cluster, wall-clock
    usd_per_mtoken: float  # USD per 1e6 trained tokens
    token_budget: float | None  # tokens to train; None = no budget given
    time_to_train_s: float | None  # None without a budget
    total_cost_usd: float | None  # None without a budget
    gpu_hours: float | None  # None without a budget

    @property
    def effective_tokens_per_s(self) -> float:
        """Throughput averaged over wall-clock time (tokens_per_s * goodput)."""
        return self.tokens_per_s * self.goodput

    @property
    def time_to_train_days(self) -> float | None:
        """Time to train in days (None without a budget)."""
        return None if self.time_to_train_s is None else self.time_to_train_s / SECONDS_PER_DAY

    def as_dict(self) -> dict[str, float | int | None]:
        """Plain dict of every field (for JSON)."""
        return asdict(self)


def cost_figures(
    tokens_per_s: float,
    num_gpus: int,
    usd_per_gpu_hour: float,
    token_budget: float | None = None,
    goodput: float = 1.0,
) -> CostFigures:
    """$/hour, $/Mtoken and (with a budget) time, cost and GPU-hours to train; see module doc."""
    if not (tokens_per_s > 0 and math.isfinite(tokens_per_s)):
        raise SpecError(f"tokens_per_s={tokens_per_s!r} must be a positive finite number")
    if not (isinstance(num_gpus, int) and num_gpus > 0):
        raise SpecError(f"num_gpus={num_gpus!r} must be a positive integer")
    if not (usd_per_gpu_hour >= 0 and math.isfinite(usd_per_gpu_hour)):
        raise SpecError(f"usd_per_gpu_hour={usd_per_gpu_hour!r} must be a finite number >= 0")
    check_goodput(goodput)
    if token_budget is not None and not (token_budget > 0 and math.isfinite(token_budget)):
        raise SpecError(f"token_budget={token_budget!r} must be a positive finite number of tokens")
    usd_per_hour = num_gpus * usd_per_gpu_hour
    eff = tokens_per_s * goodput
    t = cost = gpuh = None
    if token_budget is not None:
        t = token_budget / eff
        cost = usd_per_hour * t / SECONDS_PER_HOUR
        gpuh = num_gpus * t / SECONDS_PER_HOUR
    return CostFigures(
        num_gpus=num_gpus,
        usd_per_gpu_hour=usd_per_gpu_hour,
        tokens_per_s=tokens_per_s,
        goodput=goodput,
        usd_per_hour=usd_per_hour,
        usd_per_mtoken=usd_per_mtoken(tokens_per_s, num_gpus, usd_per_gpu_hour, goodput),
        token_budget=token_budget,
        time_to_train_s=t,
        total_cost_usd=cost,
        gpu_hours=gpuh,
    )


def check_goodput(goodput: float) -> float:
    """Return goodput if 0 < g <= 1, else raise SpecError naming the value."""
    if not (isinstance(goodput, int | float) and 0 < goodput <= 1):
        raise SpecError(
            f"goodput={goodput!r} must be in (0, 1] (e.g. 0.9 = 10% of time lost to restarts and failures)"
        )
    return float(goodput)


def format_usd(usd: float) -> str:
    """Human-readable dollars: '$355,556', '$12.50', '$0.3556'."""
    if abs(usd) >= 100:
        return f"${usd:,.0f}"
    if abs(usd) >= 1:
        return f"${usd:,.2f}"
    return f"${usd:.4f}"


def parse_usd(text: str | float | int, field: str = "max-spend") -> float:
    """Parse a dollar amount like '2M', '$500k', '1,500,000' or 2e6 into USD (suffixes K, M, B only)."""
    if isinstance(text, str):
        text = text.strip().lstrip("$")
    return parse_count(text, field, "USD amount", ("", "K", "M", "B"))


def format_usd_short(usd: float) -> str:
    """Compact dollars for tables: '$919K', '$1.23M', '$12.5', '$0.36'."""
    for suffix, mult in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(usd) >= mult:
            return f"${usd / mult:.3g}{suffix}"
    return f"${usd:.3g}"
