"""Phrase rules for the budgets: money ('under $5M' is a total spend, '$0.50 per million tokens' a
$/Mtoken rate) and time (a deadline: '30 days', '2 weeks', 'a month'; durations only, never dates).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from autopar.cli.ask_parse.errors import AskError
from autopar.cli.ask_parse.facts import Hit
from autopar.cli.ask_parse.numbers import (
    COUNT_SCALE,
    NUM,
    QTY,
    finite,
    parse_number,
    plain_number,
    positive,
    quantity,
)
from autopar.cli.ask_parse.tokens import Tok, word_at
from autopar.cli.ask_parse.vocabulary import (
    DOLLAR_WORDS,
    DURATION_UNITS,
    MAGNITUDES,
    MTOK_WORDS,
    RATE_UNIT_WORDS,
    TOKEN_WORDS,
)
from autopar.errors import SpecError
from autopar.text import excerpt

_MONEY = re.compile(rf"\$({NUM})([kmb]?)(/m(?:tok|toks|token|tokens))?", re.A)
_DURATION = re.compile(rf"({NUM})(h|hrs?|d|days?|w|wks?|mo|y|yrs?)", re.A)


def _rate_suffix(toks: Sequence[Tok], i: int) -> int:
    """Words used by 'per million tokens', 'per Mtok', '/ Mtok' at i (0 when none)."""
    if word_at(toks, i) in ("per", "/", "a"):
        if word_at(toks, i + 1) in MTOK_WORDS:
            return 2
        if word_at(toks, i + 1) in ("million", "1m", "m") and word_at(toks, i + 2) in TOKEN_WORDS:
            return 3
    return 1 if word_at(toks, i) in ("/mtok", "/mtoken", "/mtokens") else 0


def _money_amount(toks: Sequence[Tok], i: int) -> tuple[int, float, bool] | None:
    """(words used, USD, already a $/Mtoken rate) of '$5M', '$5 million', '5M dollars', 'USD 500k', '$0.5/Mtok'."""
    m = _MONEY.fullmatch(word_at(toks, i))
    if m is not None:
        value = finite(parse_number(m.group(1)) * COUNT_SCALE[m.group(2)], word_at(toks, i))
        magnitude = MAGNITUDES.get(word_at(toks, i + 1)) if not m.group(2) and not m.group(3) else None
        if magnitude:
            return 2, finite(value * magnitude, word_at(toks, i)), False
        return 1, value, m.group(3) is not None
    if word_at(toks, i) == "usd":
        q = quantity(toks, i + 1, "kmb")
        return (q[0] + 1, q[1], False) if q else None
    q = quantity(toks, i, "kmb")
    if q is not None and word_at(toks, i + q[0]) in DOLLAR_WORDS:
        return q[0] + 1, q[1], False
    if q is not None and word_at(toks, i + q[0]) in RATE_UNIT_WORDS:
        return q[0] + 1, q[1], True
    return None


def money_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """A spending cap ('under $5M', '5 million dollars') or a $/Mtoken cap ('$0.50 per million tokens')."""
    amount = _money_amount(toks, i)
    if amount is None:
        return None
    used, usd, rate = amount
    more = 0 if rate else _rate_suffix(toks, i + used)
    return positive((used + more, "rate" if rate or more else "spend", usd), toks, i, "an amount")


def duration_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """A deadline: '30 days', '2 weeks', '720h', '3mo', 'a month' (durations only, never dates)."""
    m = _DURATION.fullmatch(word_at(toks, i))
    if m is not None and not word_at(toks, i + 1).startswith("parallel"):  # '3D parallelism' is no deadline
        return 1, "deadline", _deadline(parse_number(m.group(1)), DURATION_UNITS[m.group(2)])
    unit = DURATION_UNITS.get(word_at(toks, i + 1))
    if unit is None:
        return None
    if word_at(toks, i) in ("a", "one"):
        return 2, "deadline", _deadline(1.0, unit)
    q = QTY.fullmatch(word_at(toks, i))
    if q is None or q.group(2):
        return None
    return 2, "deadline", _deadline(parse_number(q.group(1)), unit)


def _deadline(value: float, unit: str) -> str:
    """The --deadline text ('30d', '1.5w'), checked as `whatif --deadline` will read it."""
    from autopar.units import parse_duration

    text = f"{plain_number(value)}{unit}"
    try:
        parse_duration(text)
    except SpecError:
        raise AskError(
            f"'{excerpt(text)}' is no deadline: a positive, finite duration, e.g. 30 days"
        ) from None
    return text
