"""Units at the edges: byte and FLOP constants, token counts, durations and $/Mtoken, parsed and formatted once.

Inside autopar every quantity is SI (bytes, seconds, FLOP, FLOP/s, tokens); these helpers convert at the
edges (CLI options, tables, reports). Parsers raise `SpecError` with one line naming the field and value.
"""

from __future__ import annotations

import math
import re

from autopar.errors import SpecError

# Bytes: binary (what allocators and nvidia-smi report) and decimal (what vendors sell).
KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40
GB = 1e9
TB = 1e12
# Compute: 1 TFLOP = 1e12 floating-point operations (TFLOP/s likewise).
TFLOP = 1e12
# Time.
SECONDS_PER_MINUTE = 60.0
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0
TOKENS_PER_MTOKEN = 1e6

# Count suffixes: K, M, B = G (billion), T, P; case-insensitive ("15m" = 15e6 tokens, never minutes).
_COUNT_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_COUNT_RE = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-z]?)\s*$")
# Thousands separators as people write them: groups of three after 1-3 leading digits ('1,234,567.5').
_GROUPED = re.compile(r"\s*([+-]?\$?)(\d{1,3}(?:,\d{3})+)([^,]*)")


def drop_thousands_commas(text: str) -> str | None:
    """`text` without its thousands commas ('1,500,000' -> '1500000'); None when a comma is misplaced
    ('1,e5', '1,2', '12,34'), which must not be read as another number."""
    if "," not in text:
        return text
    m = _GROUPED.fullmatch(text)
    return None if m is None else m.group(1) + m.group(2).replace(",", "") + m.group(3)


_DURATION_RE = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-z]*)\s*$")
_DURATION_UNITS: dict[str, float] = {}
for _names, _seconds in (
    (("s", "sec", "secs", "second", "seconds"), 1.0),
    (("min", "mins", "minute", "minutes"), SECONDS_PER_MINUTE),
    (("h", "hr", "hrs", "hour", "hours"), SECONDS_PER_HOUR),
    (("d", "day", "days"), SECONDS_PER_DAY),
    (("w", "wk", "week", "weeks"), 7 * SECONDS_PER_DAY),
    (("mo", "month", "months"), 30 * SECONDS_PER_DAY),
    (("y", "yr", "year", "years"), 365 * SECONDS_PER_DAY),
):
    _DURATION_UNITS.update(dict.fromkeys(_names, _seconds))


def _positive_finite(value: float, field: str, text: object, what: str) -> float:
    if not (value > 0 and math.isfinite(value)):
        raise SpecError(f"{field}={text!r} must be a positive, finite {what}")
    return value


def parse_count(text: str | float | int, field: str, what: str, suffixes: tuple[str, ...]) -> float:
    """A positive count with an optional SI suffix ('2T', '500B', '1.5e12', '10k', '1,000')."""
    if isinstance(text, bool):
        raise SpecError(f"{field}={text!r} is not a {what}")
    if isinstance(text, int | float):
        return _positive_finite(float(text), field, text, what)
    plain = drop_thousands_commas(str(text).replace("_", ""))
    m = _COUNT_RE.match(plain) if plain is not None else None
    suffix = m.group(2).upper() if m else ""
    if not m or suffix not in suffixes:
        raise SpecError(
            f"{field}={text!r} is not a {what}; use a number with an optional suffix "
            f"{', '.join(s for s in suffixes if s)}, e.g. 2T, 500B, 1.5T, 300M, 10K"
        )
    return _positive_finite(float(m.group(1)) * _COUNT_SUFFIX[suffix], field, text, what)


def parse_tokens(text: str | float | int, field: str = "tokens") -> float:
    """Parse a token count like '2T', '500B', '1.5T', '300M', '10k', '1e12' or 2e12 into tokens."""
    return parse_count(text, field, "token count", tuple(_COUNT_SUFFIX))


def format_tokens(tokens: float) -> str:
    """Short token count that parse_tokens reads back to 4 significant digits: '1T', '1.5T', '500B'."""
    for suffix, mult in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if tokens >= mult:
            return f"{tokens / mult:.4g}{suffix}"
    return f"{tokens:.4g}"


def parse_duration(text: str | float | int, field: str = "deadline") -> float:
    """Parse a duration like '30d', '720h', '6w', '3mo', '45min', '3600s' (or seconds) into seconds."""
    if isinstance(text, bool):
        raise SpecError(f"{field}={text!r} is not a duration")
    if isinstance(text, int | float):
        return _positive_finite(float(text), field, text, "duration")
    m = _DURATION_RE.match(str(text))
    unit = m.group(2).lower() if m else ""
    if m and unit == "m":
        raise SpecError(f"{field}={text!r} is ambiguous: write 'min' for minutes or 'mo' for months")
    if not m or unit not in _DURATION_UNITS:
        raise SpecError(
            f"{field}={text!r} is not a duration; use a number and a unit: "
            "s, min, h, d, w, mo (30 d), y (365 d), e.g. 30d or 720h"
        )
    return _positive_finite(float(m.group(1)) * _DURATION_UNITS[unit], field, text, "duration")


def format_duration(seconds: float, day_unit: str = " days") -> str:
    """The one duration formatter (step times, search times, time to train, deadlines): the largest unit that
    reads as at least 2 of it, days and hours to 0.1, smaller units to 3 significant digits.

    '11.6 days', '5.2 h', '42.5 min', '90 s', '12.7 s', '1.32 s', '350 ms', '12.5 ms'.
    """
    if seconds >= 2 * SECONDS_PER_DAY:
        return f"{seconds / SECONDS_PER_DAY:,.1f}{day_unit}"
    if seconds >= 2 * SECONDS_PER_HOUR:
        return f"{seconds / SECONDS_PER_HOUR:.1f} h"
    if seconds >= 2 * SECONDS_PER_MINUTE:
        return f"{_sig3(seconds / SECONDS_PER_MINUTE)} min"
    if seconds >= 1:
        return f"{_sig3(seconds)} s"
    return f"{_sig3(seconds * 1e3)} ms"


def _sig3(x: float) -> str:
    """3 significant digits without exponent notation for 0 <= x < 1000 ('120', '42.5', '1.32', '0.05')."""
    return f"{x:.0f}" if x >= 99.95 else f"{x:.3g}"


def format_duration_short(seconds: float) -> str:
    """Compact duration for tables: '21.4 d', '5.2 h', '42 min'."""
    return format_duration(seconds, " d")


def usd_per_mtoken(
    tokens_per_s: float, num_gpus: int, usd_per_gpu_hour: float, goodput: float = 1.0
) -> float:
    """USD per million trained tokens: cluster $/s over effective tokens/s (x goodput), times 1e6.

    usd_per_mtoken = num_gpus * usd_per_gpu_hour / 3600 / (tokens_per_s * goodput) * 1e6; inf at zero throughput.
    """
    effective = tokens_per_s * goodput
    if hasattr(effective, "shape"):  # an array of throughputs (the exhaustive sweep): the same formula
        import numpy as np

        with np.errstate(divide="ignore", over="ignore"):
            usd = num_gpus * usd_per_gpu_hour / SECONDS_PER_HOUR / effective * TOKENS_PER_MTOKEN
        return np.where(effective > 0, usd, math.inf)
    if effective <= 0:
        return math.inf
    return num_gpus * usd_per_gpu_hour / SECONDS_PER_HOUR / effective * TOKENS_PER_MTOKEN


# Size suffixes on counts ("one syntax", issue 46 item 5), one convention for every count a user writes:
# - counts that are powers of two by habit - GPUs, sequences in a batch, parallel degrees, sequence lengths -
#   read K as 1,024 and M as 1,048,576 ("16K H100s" in the Llama 3 paper are 16,384 GPUs; Llama 3.1's "128K
#   context" is 131,072 tokens);
# - counts people write in thousands - search trials, tokens - read K as 1,000 and M as 1,000,000 (tokens take
#   the longer list of _COUNT_SUFFIX as well: `--tokens 15T`).
# Case does not matter (8k = 8K); thousands commas ('1,024') and underscores ('1_024') are read as written.
BINARY_SUFFIX: dict[str, int] = {"": 1, "K": 2**10, "M": 2**20}
DECIMAL_SUFFIX: dict[str, int] = {"": 1, "K": 10**3, "M": 10**6}
_SIGNED_COUNT_RE = re.compile(rf"^\s*([+-]?)\s*({_NUMBER})\s*([A-Za-z]?)\s*$")
_SUFFIXED_NUMBER = re.compile(r"(?<!\w)(?<!\d\.)(\d+(?:\.\d+)?)([A-Za-z])(?!\w)")


def _suffix_words(suffixes: dict[str, int]) -> str:
    """'K = 1,024, M = 1,048,576' for a suffix table."""
    return ", ".join(f"{s} = {v:,}" for s, v in suffixes.items() if s)


def parse_whole_count(
    text: str | int, field: str, what: str, suffixes: dict[str, int] = BINARY_SUFFIX, example: str = "16K"
) -> int:
    """A whole count, optionally with a suffix of `suffixes` ('16K' = 16,384 with BINARY_SUFFIX, 16,000 with
    DECIMAL_SUFFIX); the sign is kept, so the range checks stay with the consumer of the value."""
    if isinstance(text, bool):
        raise SpecError(f"{field}={text!r} is not a {what}")
    if isinstance(text, int):
        return text
    plain = drop_thousands_commas(str(text).replace("_", ""))
    m = _SIGNED_COUNT_RE.match(plain) if plain is not None else None
    suffix = m.group(3).upper() if m else ""
    if not m or suffix not in suffixes:
        raise SpecError(
            f"{field}={text!r} is not a {what}; use a whole number, optionally with a suffix "
            f"({_suffix_words(suffixes)}), e.g. {example}"
        )
    value = float(m.group(2)) * suffixes[suffix]
    if not (math.isfinite(value) and value == int(value)):
        scale = f" ({suffix} = {suffixes[suffix]:,})" if suffix else ""
        raise SpecError(f"{field}={text!r} is not a whole {what}{scale}")
    return -int(value) if m.group(1) == "-" else int(value)


def expand_count_suffixes(text: str, suffixes: dict[str, int] = BINARY_SUFFIX) -> str:
    """`text` with each whole number written with a suffix of `suffixes` spelt out, the rest as it was:
    '1k..4k' -> '1024..4096', '64,1K' -> '64,1024' (for values with a grammar of their own, such as GPU-count
    ranges, whose reader then reads plain numbers)."""

    def spelt(m: re.Match[str]) -> str:
        mult = suffixes.get(m.group(2).upper())
        value = float(m.group(1)) * mult if mult else math.nan
        return str(int(value)) if math.isfinite(value) and value == int(value) else m.group(0)

    return _SUFFIXED_NUMBER.sub(spelt, text)


def parse_seq_len(text: str | int) -> int:
    """A sequence length: a whole number of tokens, or with a binary suffix K / M ('8k' = 8192)."""
    tokens = parse_whole_count(text, "seq-len", "sequence length", BINARY_SUFFIX, "8192, 8k, 32K, 128k")
    if tokens < 1:
        raise SpecError(f"seq-len={text!r} must be a positive whole number of tokens")
    return tokens
