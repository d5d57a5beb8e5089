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
import re
from dataclasses import asdict, dataclass

from autopar.errors import SpecError

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0

_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_TOKENS_RE = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-z]?)\s*$")
_DURATION_UNITS = {
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hrs": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
    "w": 7 * 86400.0,
    "wk": 7 * 86400.0,
    "week": 7 * 86400.0,
    "weeks": 7 * 86400.0,
    "mo": 30 * 86400.0,
    "month": 30 * 86400.0,
    "months": 30 * 86400.0,
    "y": 365 * 86400.0,
    "yr": 365 * 86400.0,
    "year": 365 * 86400.0,
    "years": 365 * 86400.0,
}
_DURATION_RE = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-z]*)\s*$")


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
    usd_per_mtoken = usd_per_hour / SECONDS_PER_HOUR / eff * 1e6
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
        usd_per_mtoken=usd_per_mtoken,
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


def parse_tokens(text: str | float | int, field: str = "tokens") -> float:
    """Parse a token count like '2T', '500B', '1.5T', '300M', '10K', '1e12' into a float."""
    if isinstance(text, bool):
        raise SpecError(f"{field}={text!r} is not a token count")
    if isinstance(text, int | float):
        value = float(text)
    else:
        m = _TOKENS_RE.match(str(text).replace("_", "").replace(",", ""))
        suffix = m.group(2).upper() if m else ""
        if not m or suffix not in _SUFFIX:
            raise SpecError(
                f"{field}={text!r} is not a token count; use a number with an optional "
                "suffix K, M, B (or G), T, P, e.g. 2T, 500B, 1.5T, 300M, 10K"
            )
        value = float(m.group(1)) * _SUFFIX[suffix]
    if not (value > 0 and math.isfinite(value)):
        raise SpecError(f"{field}={text!r} must be a positive, finite token count")
    return value


def parse_duration(text: str | float | int, field: str = "deadline") -> float:
    """Parse a duration like '30d', '720h', '6w', '3mo', '45min', '3600s' into seconds."""
    if isinstance(text, bool):
        raise SpecError(f"{field}={text!r} is not a duration")
    if isinstance(text, int | float):
        value = float(text)
    else:
        m = _DURATION_RE.match(str(text))
        unit = m.group(2).lower() if m else ""
        if m and unit == "m":
            raise SpecError(f"{field}={text!r} is ambiguous: write 'min' for minutes or 'mo' for months")
        if not m or not unit or unit not in _DURATION_UNITS:
            raise SpecError(
                f"{field}={text!r} is not a duration; use a number and a unit: "
                "s, min, h, d, w, mo (30 d), y (365 d), e.g. 30d or 720h"
            )
        value = float(m.group(1)) * _DURATION_UNITS[unit]
    if not (value > 0 and math.isfinite(value)):
        raise SpecError(f"{field}={text!r} must be a positive, finite duration")
    return value


def format_duration(seconds: float, day_unit: str = " days") -> str:
    """Human-readable duration: '11.6 days', '5.2 h', '42 min', '30 s'."""
    if seconds >= 2 * SECONDS_PER_DAY:
        return f"{seconds / SECONDS_PER_DAY:,.1f}{day_unit}"
    if seconds >= 2 * SECONDS_PER_HOUR:
        return f"{seconds / SECONDS_PER_HOUR:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def format_usd(usd: float) -> str:
    """Human-readable dollars: '$355,556', '$12.50', '$0.3556'."""
    if abs(usd) >= 100:
        return f"${usd:,.0f}"
    if abs(usd) >= 1:
        return f"${usd:,.2f}"
    return f"${usd:.4f}"


def format_tokens(tokens: float) -> str:
    """Short token count: '1T', '1.5T', '500B', '300M'."""
    for suffix, mult in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if tokens >= mult:
            return f"{tokens / mult:.4g}{suffix}"
    return f"{tokens:.4g}"


def parse_usd(text: str | float | int, field: str = "max-spend") -> float:
    """Parse a dollar amount like '2M', '$500k', '1,500,000' or 2e6 into USD."""
    if isinstance(text, bool):
        raise SpecError(f"{field}={text!r} is not an amount of USD")
    if isinstance(text, int | float):
        value = float(text)
    else:
        m = _TOKENS_RE.match(str(text).strip().lstrip("$").replace("_", "").replace(",", ""))
        suffix = m.group(2).upper() if m else ""
        if not m or suffix not in ("", "K", "M", "B"):
            raise SpecError(f"{field}={text!r} is not an amount of USD; use e.g. 500000, 500K, $2M or 1.5B")
        value = float(m.group(1)) * _SUFFIX[suffix]
    if not (value > 0 and math.isfinite(value)):
        raise SpecError(f"{field}={text!r} must be a positive, finite amount of USD")
    return value


def format_usd_short(usd: float) -> str:
    """Compact dollars for tables: '$919K', '$1.23M', '$12.5', '$0.36'."""
    for suffix, mult in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(usd) >= mult:
            return f"${usd / mult:.3g}{suffix}"
    return f"${usd:.3g}"


def format_duration_short(seconds: float) -> str:
    """Compact duration for tables: '21.4 d', '5.2 h', '42 min'."""
    return format_duration(seconds, " d")
