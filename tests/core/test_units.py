"""Units at the edges: one parser per kind of value, one $/Mtoken formula."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autopar.errors import SpecError
from autopar.parse import parse_count
from autopar.units import (
    GB,
    TFLOP,
    GiB,
    format_duration,
    format_duration_short,
    format_tokens,
    parse_duration,
    parse_tokens,
    usd_per_mtoken,
)


def test_constants():
    assert (GiB, GB, TFLOP) == (1073741824, 1e9, 1e12)


@pytest.mark.parametrize(
    "text,tokens",
    [
        ("2T", 2e12),
        ("500b", 5e11),
        ("1.5T", 1.5e12),
        ("15m", 15e6),
        ("10K", 1e4),
        ("1e12", 1e12),
        ("1,000", 1e3),
    ],
)
def test_one_token_parser_for_cli_and_api(text, tokens):
    # --tokens of optimize (autopar/parse.py) and of whatif (costs) accept the same inputs: the superset of both
    assert parse_tokens(text) == tokens
    assert parse_count(text) == tokens


@pytest.mark.parametrize("bad", ["lots", "2X", "-1T", "0", True, "inf"])
def test_token_errors_are_one_line_and_name_the_field(bad):
    with pytest.raises(SpecError) as ei:
        parse_tokens(bad, field="tokens")
    assert str(ei.value).startswith("tokens=") and "\n" not in str(ei.value)


@given(st.floats(min_value=1, max_value=1e15))
def test_format_tokens_reads_back(x):
    assert parse_tokens(format_tokens(x)) == pytest.approx(x, rel=1e-3)


def test_durations():
    assert parse_duration("30d") == 30 * 86400 and parse_duration("45min") == 2700
    with pytest.raises(SpecError, match="ambiguous"):
        parse_duration("3m")
    assert format_duration(1e6) == "11.6 days" and format_duration(90) == "90 s"


@pytest.mark.parametrize(
    "seconds,text",
    [
        # by hand: the largest unit that reads as >= 2 of it; days/hours to 0.1, the rest to 3 significant digits
        (0.0125, "12.5 ms"),
        (0.35, "350 ms"),
        (0.9996, "1000 ms"),  # 999.6 ms rounds to 1000, never '1e+03'
        (1.3179, "1.32 s"),
        (12.698, "12.7 s"),  # a step time
        (119.96, "120 s"),
        (150, "2.5 min"),  # 150 / 60
        (2550, "42.5 min"),
        (7199, "120 min"),  # 7199 / 60 = 119.98 -> 120, still below 2 h
        (5 * 3600, "5.0 h"),
        (2 * 86400 - 1, "48.0 h"),
        (1e6, "11.6 days"),  # a time to train: 1e6 / 86400 = 11.57
    ],
)
def test_one_duration_formatter_for_steps_and_training(seconds, text):
    assert format_duration(seconds) == text
    assert format_duration_short(1e6) == "11.6 d"


def test_usd_per_mtoken_by_hand():
    # 64 GPUs x $2/h = $128/h = $0.035556/s; at 100,000 tokens/s: $0.35556 per million tokens; goodput 0.8 -> /0.8
    assert usd_per_mtoken(100_000, 64, 2.0) == pytest.approx(128 / 3600 / 1e5 * 1e6)
    assert usd_per_mtoken(100_000, 64, 2.0, goodput=0.8) == pytest.approx(0.355556 / 0.8, rel=1e-5)
    assert math.isinf(usd_per_mtoken(0.0, 8, 2.0))
