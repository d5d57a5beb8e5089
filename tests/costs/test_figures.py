"""Cost figures ($/h, $/Mtoken, time and cost to train) and the token/duration/USD parsers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autopar.costs.figures import (
    cost_figures,
    format_duration,
    format_tokens,
    format_usd,
    parse_duration,
    parse_tokens,
    parse_usd,
)
from autopar.errors import AutoparError, SpecError


def test_hand_derived_figures_512_gpus_at_2_50():
    # 512 GPUs x $2.50/GPU-h = $1280/h.
    # $/Mtoken = 1280 $/h / 3600 s/h / 1e6 tokens/s * 1e6 = 0.35556 $.
    # 1e12 tokens / 1e6 tokens/s = 1e6 s = 11.574 days; cost = 1280 * 1e6 / 3600 = $355,555.56;
    # GPU-hours = 512 * 1e6 / 3600 = 142,222.2.
    f = cost_figures(tokens_per_s=1e6, num_gpus=512, usd_per_gpu_hour=2.5, token_budget=1e12)
    assert f.usd_per_hour == pytest.approx(1280.0)
    assert f.usd_per_mtoken == pytest.approx(0.355556, rel=1e-5)
    assert f.time_to_train_s == pytest.approx(1e6)
    assert f.time_to_train_days == pytest.approx(11.574074, rel=1e-6)
    assert f.total_cost_usd == pytest.approx(355_555.56, abs=0.01)
    assert f.gpu_hours == pytest.approx(142_222.22, abs=0.01)


def test_goodput_stretches_time_and_cost_not_hourly_rate():
    # goodput 0.8: effective 8e5 tokens/s -> 1.25e6 s; cost 1280 * 1.25e6 / 3600 = $444,444.44;
    # $/Mtoken 0.35556 / 0.8 = 0.44444.
    f = cost_figures(1e6, 512, 2.5, token_budget=1e12, goodput=0.8)
    assert f.usd_per_hour == pytest.approx(1280.0)
    assert f.time_to_train_s == pytest.approx(1.25e6)
    assert f.total_cost_usd == pytest.approx(444_444.44, abs=0.01)
    assert f.usd_per_mtoken == pytest.approx(0.444444, rel=1e-5)
    assert f.effective_tokens_per_s == pytest.approx(8e5)


def test_no_budget_leaves_time_and_cost_empty():
    f = cost_figures(1e6, 8, 3.0)
    assert f.time_to_train_s is None and f.total_cost_usd is None and f.gpu_hours is None
    # 8 x $3 = $24/h; 24/3600/1e6*1e6 = 0.006667 $/Mtoken
    assert f.usd_per_mtoken == pytest.approx(0.0066667, rel=1e-4)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(tokens_per_s=0.0), "tokens_per_s"),
        (dict(tokens_per_s=float("nan")), "tokens_per_s"),
        (dict(num_gpus=0), "num_gpus"),
        (dict(usd_per_gpu_hour=-1.0), "usd_per_gpu_hour"),
        (dict(goodput=0.0), "goodput"),
        (dict(goodput=1.5), "goodput"),
        (dict(token_budget=-5.0), "token_budget"),
    ],
)
def test_bad_inputs_raise_naming_the_field(kwargs, field):
    args = dict(tokens_per_s=1e5, num_gpus=8, usd_per_gpu_hour=2.0, token_budget=1e9, goodput=1.0)
    args.update(kwargs)
    with pytest.raises(SpecError, match=field):
        cost_figures(**args)


@pytest.mark.parametrize(
    "text, value",
    [
        ("2T", 2e12),
        ("500B", 5e11),
        ("1.5T", 1.5e12),
        ("300M", 3e8),
        ("10K", 1e4),
        ("10k", 1e4),
        ("1e12", 1e12),
        ("1_000_000", 1e6),
        ("2,000", 2e3),
        (" 7 B ", 7e9),
        ("3G", 3e9),
        (42, 42.0),
    ],
)
def test_parse_tokens_examples(text, value):
    assert parse_tokens(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "T", "2X", "-1T", "0", "abc", "1.5.3T", "2TB", "nan", "inf"])
def test_parse_tokens_rejects_bad_values(text):
    with pytest.raises(AutoparError, match="tokens"):
        parse_tokens(text)


_MULT = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


@given(st.integers(min_value=1, max_value=10**6), st.sampled_from(sorted(_MULT)), st.booleans())
def test_parse_tokens_integer_with_suffix(n, suffix, lower):
    text = f"{n}{suffix.lower() if lower else suffix}"
    assert parse_tokens(text) == pytest.approx(n * _MULT[suffix], rel=1e-12)


@given(st.decimals(min_value="0.001", max_value="9999", places=3), st.sampled_from(["K", "M", "B", "T"]))
def test_parse_tokens_decimal_with_suffix(d, suffix):
    assert parse_tokens(f"{d}{suffix}") == pytest.approx(float(d) * _MULT[suffix], rel=1e-9)


@given(st.floats(min_value=1.0, max_value=1e15, allow_nan=False))
def test_format_tokens_round_trips_to_4_significant_digits(x):
    assert parse_tokens(format_tokens(x)) == pytest.approx(x, rel=1e-3)


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("30d", 30 * 86400),
        ("720h", 720 * 3600),
        ("6w", 6 * 7 * 86400),
        ("45min", 2700),
        ("3600s", 3600),
        ("1.5d", 1.5 * 86400),
        ("3mo", 90 * 86400),
        ("1y", 365 * 86400),
        ("2 days", 2 * 86400),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text, msg",
    [("30", "unit"), ("3m", "ambiguous"), ("-2d", "duration"), ("0d", "positive"), ("soon", "duration")],
)
def test_parse_duration_errors(text, msg):
    with pytest.raises(SpecError, match=msg):
        parse_duration(text)


@pytest.mark.parametrize("text, usd", [("2M", 2e6), ("$500K", 5e5), ("1,500,000", 1.5e6), ("1.5B", 1.5e9)])
def test_parse_usd(text, usd):
    assert parse_usd(text) == pytest.approx(usd)


def test_parse_usd_rejects_tokens_suffix_and_negatives():
    for bad in ("2T", "-5", "lots"):
        with pytest.raises(SpecError, match="max-spend"):
            parse_usd(bad)


def test_formatting():
    assert format_duration(1e6) == "11.6 days"
    assert format_duration(5 * 3600) == "5.0 h"
    assert format_usd(355_555.56) == "$355,556"
    assert format_usd(0.35556) == "$0.3556"


@given(
    tps=st.floats(1e2, 1e8),
    n=st.integers(1, 100_000),
    price=st.floats(0.01, 50.0),
    tokens=st.floats(1e6, 1e14),
    g=st.floats(0.05, 1.0),
)
def test_figures_are_mutually_consistent(tps, n, price, tokens, g):
    f = cost_figures(tps, n, price, tokens, g)
    # cost = $/Mtoken x Mtokens; time x effective rate = tokens; GPU-hours x price = cost
    assert f.total_cost_usd == pytest.approx(f.usd_per_mtoken * tokens / 1e6, rel=1e-9)
    assert f.time_to_train_s * tps * g == pytest.approx(tokens, rel=1e-9)
    assert f.gpu_hours * price == pytest.approx(f.total_cost_usd, rel=1e-9)
    # lower goodput never makes training faster or cheaper
    f1 = cost_figures(tps, n, price, tokens, 1.0)
    assert f.time_to_train_s >= f1.time_to_train_s * (1 - 1e-12)
    assert f.total_cost_usd >= f1.total_cost_usd * (1 - 1e-12)
    # doubling the price doubles money, leaves time alone
    f2 = cost_figures(tps, n, 2 * price, tokens, g)
    assert f2.total_cost_usd == pytest.approx(2 * f.total_cost_usd, rel=1e-12)
    assert f2.time_to_train_s == f.time_to_train_s
    assert math.isfinite(f.usd_per_mtoken)
