"""Numbers as a request writes them, and back: plain and comma-grouped numbers, decimal suffixes
('15T', '500k') and magnitude words ('15 trillion'), GPU counts ('64', '64x'), and the shortest text that
reads back to a value (`plain_number`, `format_si`). Token counts and money are decimal (k = 1e3);
sequence lengths are binary and read by the workload rules.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from decimal import Decimal

from autopar.cli.ask_parse.errors import AskError
from autopar.cli.ask_parse.facts import Hit
from autopar.cli.ask_parse.tokens import Tok, skip, word_at
from autopar.cli.ask_parse.vocabulary import MAGNITUDES, TIMES_WORDS
from autopar.text import excerpt

NUM = r"(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?"
_WHOLE = re.compile(r"[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+", re.A)
QTY = re.compile(rf"({NUM})([kmbgt]?)", re.A)
_COUNT_TIMES = re.compile(r"([0-9]+)[x×]", re.A)  # '64x'
COUNT_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def parse_number(text: str) -> float:
    return finite(float(text.replace(",", "")), text)


def finite(value: float, word: str) -> float:
    """`value` when finite, else an AskError naming the word it came from."""
    if not math.isfinite(value):
        raise AskError(f"'{excerpt(word)}' is too large a number")
    return value


def positive(hit: Hit, toks: Sequence[Tok], i: int, what: str) -> Hit:
    """A hit whose value must be more than 0 (a token budget, an amount of money)."""
    if hit[2] <= 0:
        said = excerpt(" ".join(t.text for t in toks[i : i + hit[0]]))
        raise AskError(f"'{said}': {what} must be more than 0")
    return hit


def whole_number(text: str) -> int | None:
    """A whole number written without a suffix ('64', '1,024'), else None."""
    return int(text.replace(",", "")) if _WHOLE.fullmatch(text) else None


def quantity(toks: Sequence[Tok], i: int, scales: str) -> tuple[int, float] | None:
    """(words used, value) of '15T', '15 trillion', '1,500', '500k' at i: a decimal count whose suffix is
    one of `scales` (or a magnitude word after a bare number)."""
    m = QTY.fullmatch(word_at(toks, i))
    if m is None or (m.group(2) and m.group(2) not in scales):
        return None
    value = parse_number(m.group(1)) * COUNT_SCALE[m.group(2)]
    magnitude = MAGNITUDES.get(word_at(toks, i + 1))
    if not m.group(2) and magnitude is not None:
        return 2, finite(value * magnitude, word_at(toks, i))
    return 1, finite(value, word_at(toks, i))


def count_prefix(toks: Sequence[Tok], i: int) -> tuple[int, int] | None:
    """(GPU or node count, index after it) of '64', '64 x' or '64x' at i."""
    n = whole_number(word_at(toks, i))
    if n is not None:
        return n, skip(toks, i + 1, TIMES_WORDS)
    m = _COUNT_TIMES.fullmatch(word_at(toks, i))
    return (int(m.group(1)), i + 1) if m else None


def plain_number(value: float) -> str:
    """A number as the shortest text that reads back to it, never in exponent form ('0.5', '64', '0.00001')."""
    if value.is_integer() and abs(value) < 1e18:
        return str(int(value))
    return format(Decimal(repr(value)), "f")


def format_si(value: float, suffixes: str = "TBMK") -> str:
    """A count as the shortest suffixed text that reads back to exactly this value ('15T', '1.5T', '500K')."""
    for suffix in suffixes:
        mult = COUNT_SCALE[suffix.lower()]
        if value < mult:
            continue
        text = plain_number(value / mult)
        if len(text) <= 8 and parse_number(text) * mult == value:
            return text + suffix
    return plain_number(value)
