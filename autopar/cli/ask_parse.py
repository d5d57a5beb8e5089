"""`autopar ask`: a plain-language request parsed, deterministically, into one autopar command line.

No network, no language model, no randomness. The request (at most MAX_REQUEST_CHARS) is split into words
in one linear pass (the one regular expression over the whole text has no nested repetition; every other
one matches a single word), then read left to right: at each word the phrase rules below are tried in a
fixed order, each on at most a few words, against fixed word lists and the built-in catalogs (models,
GPUs), so the time is linear in the length. A word is either part of an understood phrase (a `Span`
saying what it set), a filler word ("on", "with", "under"), or reported as not understood. The problem is
then resolved into `optimize` (one cluster) or `whatif` (a deadline, several GPU types, "which GPU",
"how many GPUs") and its flags; contradictions ("64 H100 on 128 GPUs") and unknown names ("64 A2 NPUs")
are one-line `AskError`s that name what was written.

Numbers: sequence lengths are binary ("8k" = 8,192, as `--seq-len` reads them), token counts and money
decimal ("15T" = 15e12 tokens, "$500k" = 500,000 USD). GPU counts are whole numbers without a suffix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any

from autopar.defaults import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_OBJECTIVES, DEFAULT_SEQ_LEN
from autopar.errors import SpecError
from autopar.text import excerpt, one_line, shell_word

MAX_REQUEST_CHARS = 2000  # a longer request is refused before any parsing (bounded time on any input)
OPTIMIZE, WHATIF = "optimize", "whatif"


class AskError(SpecError):
    """A request that cannot be turned into one command: one line naming the words at fault."""


# ------------------------------------------------------------------------------------------------ words
@dataclass(frozen=True)
class Tok:
    """One word of the request: as written, in lower case, and where it stands."""

    text: str
    low: str
    start: int
    end: int
    after_break: bool = False  # punctuation (',', ';', '.') stands between it and the word before


# A word: a run of anything but spaces and , ; ( ) [ ] { } " ' ! ? = (a comma between digits stays: 1,000).
_WORD = re.compile(r"(?:[0-9],(?=[0-9])|[^\s,;()\[\]{}\"'!?=])+")
_NUMBER_THEN_WORD = re.compile(r"([0-9][0-9.,]*[a-z]?)-([a-z]+)", re.I | re.A)  # '8k-token', '30-day'


def tokenize(text: str) -> list[Tok]:
    """The request's words, trailing '.' and ':' dropped, punctuation-only words skipped, and a number
    joined to a word by '-' split in two ('8k-token context' reads as '8k token context')."""
    out: list[Tok] = []
    for m in _WORD.finditer(text):
        word = m.group().rstrip(".:")
        if not any(c.isalnum() for c in word):
            continue
        split = _NUMBER_THEN_WORD.fullmatch(word)
        parts = [(split.group(1), 0), (split.group(2), split.start(2))] if split else [(word, 0)]
        for part, at in parts:
            start = m.start() + at
            gap = text[out[-1].end : start] if out else ""
            out.append(Tok(part, part.lower(), start, start + len(part), not gap.isspace() and bool(gap)))
    return out


def _one_phrase(toks: Sequence[Tok], i: int, n: int) -> bool:
    """Whether words i..i+n-1 exist and no punctuation splits them (a name never spans a comma)."""
    return i + n <= len(toks) and not any(t.after_break for t in toks[i + 1 : i + n])


def _words(*ws: str) -> frozenset[str]:
    return frozenset(ws)


FILLERS = _words(
    *("a", "an", "the", "on", "with", "for", "to", "of", "and", "or", "in", "within", "by", "under", "below"),
    *("at", "using", "use", "train", "training", "trained", "pretrain", "pretraining", "pre-train", "run"),
    *("i", "we", "want", "need", "should", "would", "could", "can", "what", "is", "are", "it", "me", "my"),
    *("our", "us", "model", "models", "please", "plan", "find", "best", "strategy", "parallelism", "budget"),
    *("max", "maximum", "most", "than", "less", "no", "more", "up", "cap", "spend", "spending", "total"),
    *("cost", "costs", "llm", "gpu", "gpus", "get", "do", "be", "possible", "over", "from", "across", "via"),
    *("time", "precision", "framework", "stack", "cluster", "about", "around", "if", "so", "that", "this"),
    *("just", "only", "help", "how", "many", "tokens", "token", "parameters", "params", "parameter"),
    *("dense", "pytorch", "size", "length", "dataset", "data", "one", "option", "options", "will"),
)
MAGNITUDES = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
TOKEN_WORDS = _words("token", "tokens", "tok", "toks")
SEQ_WORDS = _words(
    *("seq", "sequence", "context", "ctx", "seq-len", "seq_len", "seqlen", "context-length"),
    *("context_length", "context-window", "sequence-length", "ctx-len"),
)
LEN_WORDS = _words("len", "length", "size", "window")
LINK_WORDS = _words("of", "is")
SEQUENCE_NOUNS = _words("sequences", "seqs", "samples")
PER_WORDS = _words("per", "a", "/", "each", "every")
STEP_WORDS = _words("step", "steps", "batch", "iteration", "iter", "update")
BATCH_WORDS = _words("batch", "batch-size", "batch_size", "gbs", "global-batch", "global_batch")
DOLLAR_WORDS = _words("dollars", "dollar", "usd", "$", "bucks")
MTOK_WORDS = _words("mtok", "mtoks", "mtoken", "mtokens")
RATE_UNIT_WORDS = _words("$/mtok", "$/mtoken", "$/mtokens", "usd/mtok", "usd/mtoken")
GPU_NOUNS = _words(
    "gpu", "gpus", "accelerator", "accelerators", "card", "cards", "device", "devices", "chips"
)
OTHER_ACCELERATORS = _words("npu", "npus", "tpu", "tpus", "ipu", "ipus", "hpu", "hpus", "lpu", "lpus")
NODE_WORDS = _words(
    "node", "nodes", "server", "servers", "host", "hosts", "machine", "machines", "box", "boxes"
)
RACK_WORDS = _words("rack", "racks")
TIMES_WORDS = _words("x", "×")
SYSTEM_PREFIXES = ("dgx", "hgx")  # '8 DGX H100' counts systems (nodes), not GPUs
DURATION_UNITS = {
    **dict.fromkeys(("hour", "hours", "h", "hr", "hrs"), "h"),
    **dict.fromkeys(("day", "days", "d"), "d"),
    **dict.fromkeys(("week", "weeks", "w", "wk", "wks"), "w"),
    **dict.fromkeys(("month", "months", "mo"), "mo"),
    **dict.fromkeys(("year", "years", "y", "yr", "yrs"), "y"),
}
PRECISIONS = {"bf16": "bf16", "bfloat16": "bf16", "fp8": "fp8", "float8": "fp8"}
PRECISION_ORDER = ("bf16", "fp8")
FRAMEWORK_ALIASES = {
    "megatron-lm": "megatron",
    "megatron-core": "megatron",
    "mcore": "megatron",
    "megatron-bridge": "megatron",
    "fsdp2": "fsdp",
    "pytorch-fsdp": "fsdp",
    "colossal-ai": "colossalai",
    "paddlepaddle": "paddle",
    "mindformers": "mindspore",
    "veomni": "vescale",
}
# Goal words -> the objective put first in --objectives (optimize recommends that objective's best first and
# sorts its Pareto table by it); the others keep their default order.
GOALS: dict[tuple[str, ...], str] = {
    **dict.fromkeys(
        [("fastest",), ("quickest",), ("as", "fast", "as", "possible"), ("shortest", "time")], "throughput"
    ),
    **dict.fromkeys([(w, "throughput") for w in ("max", "maximum", "highest", "most", "best")], "throughput"),
    **dict.fromkeys([("cheapest",), ("least", "expensive"), ("as", "cheap", "as", "possible")], "cost"),
    **dict.fromkeys(
        [(w, c) for w in ("lowest", "least", "minimum", "min") for c in ("cost", "price")], "cost"
    ),
    **dict.fromkeys([("safest",), ("most", "free", "memory"), ("most", "memory")], "headroom"),
    **dict.fromkeys([(w, "headroom") for w in ("most", "max", "maximum", "more")], "headroom"),
    ("most", "memory", "headroom"): "headroom",
}
_GOALS_BY_WORD: dict[str, list[tuple[str, ...]]] = {}
for _phrase in sorted(GOALS, key=len, reverse=True):  # the longest phrase first
    _GOALS_BY_WORD.setdefault(_phrase[0], []).append(_phrase)
GOAL_WORDS = {"throughput": "fastest", "cost": "cheapest", "headroom": "most headroom"}
CUES: tuple[tuple[str, ...], ...] = (("how", "many"), ("which",), ("compare",), ("vs",), ("versus",))
CUE_NOUNS = _words("gpu", "gpus", "hardware", "accelerator", "accelerators", "one", "option", "is")

_NUM = r"(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?"
_PLAIN = re.compile(_NUM, re.A)
_WHOLE = re.compile(r"[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+", re.A)
_QTY = re.compile(rf"({_NUM})([kmbgt]?)", re.A)
_MONEY = re.compile(rf"\$({_NUM})([kmb]?)(/m(?:tok|toks|token|tokens))?", re.A)
_DURATION = re.compile(rf"({_NUM})(h|hrs?|d|days?|w|wks?|mo|y|yrs?)", re.A)
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)b", re.A)
_COUNT_TIMES = re.compile(r"([0-9]+)[x×]", re.A)  # '64x'
_COUNT_TIMES_NAME = re.compile(r"([0-9]+)[x×]([a-z].*)", re.A)  # '64xh100'
_GPU_LIKE = re.compile(r"[a-z][a-z0-9-]*[0-9][a-z0-9-]*", re.A)  # a letter first and a digit somewhere
COUNT_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def _number(text: str) -> float:
    return _finite(float(text.replace(",", "")), text)


def _finite(value: float, word: str) -> float:
    """`value` when finite, else an AskError naming the word it came from."""
    if not math.isfinite(value):
        raise AskError(f"'{excerpt(word)}' is too large a number")
    return value


def _positive(hit: Hit, toks: Sequence[Tok], i: int, what: str) -> Hit:
    """A hit whose value must be more than 0 (a token budget, an amount of money)."""
    if hit[2] <= 0:
        said = excerpt(" ".join(t.text for t in toks[i : i + hit[0]]))
        raise AskError(f"'{said}': {what} must be more than 0")
    return hit


def _whole(text: str) -> int | None:
    """A whole number written without a suffix ('64', '1,024'), else None."""
    return int(text.replace(",", "")) if _WHOLE.fullmatch(text) else None


def _has_letter(text: str) -> bool:
    return any(c.isalpha() for c in text)


# ------------------------------------------------------------------------------------------------ phrases
@dataclass(frozen=True)
class Fact:
    """What a phrase of the request says: its kind, its value and the words [first, end) it spans."""

    kind: str
    value: Any
    first: int
    end: int


# A phrase rule: at word i, (words used, kind, value) or None.
Hit = tuple[int, str, Any]
Rule = Callable[[Sequence[Tok], int], Hit | None]


def _at(toks: Sequence[Tok], i: int) -> str:
    """The lower-case word at i ('' past the end)."""
    return toks[i].low if i < len(toks) else ""


def _skip(toks: Sequence[Tok], i: int, words: frozenset[str]) -> int:
    """i + 1 when the word at i is one of `words` (an optional word), else i."""
    return i + 1 if _at(toks, i) in words else i


def _quantity(toks: Sequence[Tok], i: int, scales: str) -> tuple[int, float] | None:
    """(words used, value) of '15T', '15 trillion', '1,500', '500k' at i: a decimal count whose suffix is
    one of `scales` (or a magnitude word after a bare number)."""
    m = _QTY.fullmatch(_at(toks, i))
    if m is None or (m.group(2) and m.group(2) not in scales):
        return None
    value = _number(m.group(1)) * COUNT_SCALE[m.group(2)]
    magnitude = MAGNITUDES.get(_at(toks, i + 1))
    if not m.group(2) and magnitude is not None:
        return 2, _finite(value * magnitude, _at(toks, i))
    return 1, _finite(value, _at(toks, i))


def _count_prefix(toks: Sequence[Tok], i: int) -> tuple[int, int] | None:
    """(GPU or node count, index after it) of '64', '64 x' or '64x' at i."""
    n = _whole(_at(toks, i))
    if n is not None:
        return n, _skip(toks, i + 1, TIMES_WORDS)
    m = _COUNT_TIMES.fullmatch(_at(toks, i))
    return (int(m.group(1)), i + 1) if m else None


# --- the workload
def _batch_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """'global batch 1024', 'batch size of 512', 'gbs 512', '1024 sequences per step', '4M tokens per step'."""
    j = _skip(toks, i, _words("global"))
    if _at(toks, j) in BATCH_WORDS:
        k = _skip(toks, _skip(toks, j + 1, _words("size")), LINK_WORDS)
        n = _whole(_at(toks, k))
        if n is not None:
            return _skip(toks, k + 1, SEQUENCE_NOUNS) - i, "batch", n
        return None
    n = _whole(_at(toks, i))
    if n is not None and _per_step(toks, i + 1, SEQUENCE_NOUNS):
        return 4, "batch", n
    q = _quantity(toks, i, "kmbgt")
    if q is not None and _per_step(toks, i + q[0], TOKEN_WORDS):
        return q[0] + 3, "batch_tokens", q[1]
    return None


def _per_step(toks: Sequence[Tok], i: int, nouns: frozenset[str]) -> bool:
    """'sequences per step', 'tokens a batch' at i."""
    return _at(toks, i) in nouns and _at(toks, i + 1) in PER_WORDS and _at(toks, i + 2) in STEP_WORDS


def _is_seq_len(word: str) -> bool:
    """A sequence length word: a number with no suffix or a binary K/M ('8k', '8192', '128K')."""
    m = _QTY.fullmatch(word)
    return m is not None and m.group(2) in ("", "k", "m")


def _seq_value(tok: Tok) -> int:
    """The sequence length a word states, as `--seq-len` reads it (8k = 8,192); AskError naming the word."""
    from autopar.units import parse_seq_len

    try:
        return parse_seq_len(tok.low)
    except SpecError:
        raise AskError(
            f"'{excerpt(tok.text)}' is no sequence length: a whole number of tokens, e.g. 8192 or 8k"
        ) from None


def _seq_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """'sequence length 8192', 'context of 8k', '8k context', '8K seq', '128k tokens context'."""
    if _at(toks, i) in SEQ_WORDS:
        j = _skip(toks, _skip(toks, i + 1, LEN_WORDS), LINK_WORDS)
        if not _is_seq_len(_at(toks, j)):
            return None
        return _skip(toks, j + 1, TOKEN_WORDS) - i, "seq_len", _seq_value(toks[j])
    if not _is_seq_len(_at(toks, i)):
        return None
    j = _skip(toks, i + 1, TOKEN_WORDS)
    if _at(toks, j) in SEQ_WORDS or (j > i + 1 and _at(toks, j) in SEQUENCE_NOUNS):
        return _skip(toks, j + 1, LEN_WORDS) - i, "seq_len", _seq_value(toks[i])
    return None


def _tokens_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """'15T tokens', '15 trillion tokens', '500B tokens', a bare '15T', 'tokens: 2T'."""
    hit = _tokens_hit(toks, i)
    return None if hit is None else _positive(hit, toks, i, "a token budget")


def _tokens_hit(toks: Sequence[Tok], i: int) -> Hit | None:
    q = _quantity(toks, i, "kmbgt")
    if q is not None:
        used, value = q
        if _at(toks, i + used) in TOKEN_WORDS:
            return used + 1, "tokens", value
        if _at(toks, i).endswith("t") or _at(toks, i + 1) == "trillion":  # trillions are tokens, never sizes
            return used, "tokens", value
        return None
    if _at(toks, i) in TOKEN_WORDS:
        j = _skip(toks, _skip(toks, i + 1, _words("budget", "count")), LINK_WORDS)
        q = _quantity(toks, j, "kmbgt")
        if q is not None and (q[0] == 2 or not _at(toks, j)[-1].isdigit()):  # a suffix or a magnitude word
            return j + q[0] - i, "tokens", q[1]
    return None


def _rate_suffix(toks: Sequence[Tok], i: int) -> int:
    """Words used by 'per million tokens', 'per Mtok', '/ Mtok' at i (0 when none)."""
    if _at(toks, i) in ("per", "/", "a"):
        if _at(toks, i + 1) in MTOK_WORDS:
            return 2
        if _at(toks, i + 1) in ("million", "1m", "m") and _at(toks, i + 2) in TOKEN_WORDS:
            return 3
    return 1 if _at(toks, i) in ("/mtok", "/mtoken", "/mtokens") else 0


def _money_amount(toks: Sequence[Tok], i: int) -> tuple[int, float, bool] | None:
    """(words used, USD, already a $/Mtoken rate) of '$5M', '$5 million', '5M dollars', 'USD 500k', '$0.5/Mtok'."""
    m = _MONEY.fullmatch(_at(toks, i))
    if m is not None:
        value = _finite(_number(m.group(1)) * COUNT_SCALE[m.group(2)], _at(toks, i))
        magnitude = MAGNITUDES.get(_at(toks, i + 1)) if not m.group(2) and not m.group(3) else None
        if magnitude:
            return 2, _finite(value * magnitude, _at(toks, i)), False
        return 1, value, m.group(3) is not None
    if _at(toks, i) == "usd":
        q = _quantity(toks, i + 1, "kmb")
        return (q[0] + 1, q[1], False) if q else None
    q = _quantity(toks, i, "kmb")
    if q is not None and _at(toks, i + q[0]) in DOLLAR_WORDS:
        return q[0] + 1, q[1], False
    if q is not None and _at(toks, i + q[0]) in RATE_UNIT_WORDS:
        return q[0] + 1, q[1], True
    return None


def _money_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """A spending cap ('under $5M', '5 million dollars') or a $/Mtoken cap ('$0.50 per million tokens')."""
    amount = _money_amount(toks, i)
    if amount is None:
        return None
    used, usd, rate = amount
    more = 0 if rate else _rate_suffix(toks, i + used)
    return _positive((used + more, "rate" if rate or more else "spend", usd), toks, i, "an amount")


def _duration_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """A deadline: '30 days', '2 weeks', '720h', '3mo', 'a month' (durations only, never dates)."""
    m = _DURATION.fullmatch(_at(toks, i))
    if m is not None and not _at(toks, i + 1).startswith("parallel"):  # '3D parallelism' is no deadline
        return 1, "deadline", _deadline(_number(m.group(1)), DURATION_UNITS[m.group(2)])
    unit = DURATION_UNITS.get(_at(toks, i + 1))
    if unit is None:
        return None
    if _at(toks, i) in ("a", "one"):
        return 2, "deadline", _deadline(1.0, unit)
    q = _QTY.fullmatch(_at(toks, i))
    if q is None or q.group(2):
        return None
    return 2, "deadline", _deadline(_number(q.group(1)), unit)


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


def plain_number(value: float) -> str:
    """A number as the shortest text that reads back to it, never in exponent form ('0.5', '64', '0.00001')."""
    if value.is_integer() and abs(value) < 1e18:
        return str(int(value))
    return format(Decimal(repr(value)), "f")


# --- the catalogs
def _catalog_hits(index: Any, words: Sequence[str]) -> list[Any]:
    """Catalog entries the words name together: an exact name or alias (joined by '-', ' ' or nothing),
    else every entry of the loose key (case, '-', '_', '.', spaces and an org prefix ignored)."""
    from autopar.catalog.names import exact_key, loose_key

    for joined in ("-".join(words), " ".join(words), "".join(words)):
        hit = index.exact.get(exact_key(joined))
        if hit is not None:
            return [hit]
    return list(index.loose.get(loose_key("".join(words)), []))


def _gpu_index() -> Any:
    from autopar.catalog.loader import gpu_catalog

    return gpu_catalog().index


def _model_index() -> Any:
    from autopar.catalog.loader import model_catalog

    return model_catalog().index


def gpu_at(toks: Sequence[Tok], i: int) -> tuple[int, str] | None:
    """(words used, catalog GPU) of the longest run of 1-3 words from i naming a GPU ('H100', 'H100 SXM',
    'A100 80GB', 'GB200 NVL72', a plural 'H100s')."""
    if not _has_letter(_at(toks, i)):
        return None
    for n in (3, 2, 1):
        if not _one_phrase(toks, i, n):
            continue
        words = [t.low for t in toks[i : i + n]]
        hits = _catalog_hits(_gpu_index(), words)
        if not hits and words[-1].endswith("s"):
            hits = _catalog_hits(_gpu_index(), [*words[:-1], words[-1][:-1]])
        if len(hits) == 1:
            return n, hits[0].name
    return None


def _model_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """A built-in model named in 1-4 words: 'Llama 3 70B', 'llama-3.1-70b', 'Llama3 70B', 'Mixtral 8x7B'."""
    if not _has_letter(_at(toks, i)):
        return None
    for n in (4, 3, 2, 1):
        if not _one_phrase(toks, i, n):
            continue
        hits = _catalog_hits(_model_index(), [t.low for t in toks[i : i + n]])
        if len(hits) == 1:
            return n, "model", hits[0].name
        if hits:
            return n, "model_ambiguous", sorted(h.name for h in hits)
    return None


@lru_cache(maxsize=1)
def presets_by_size() -> dict[float, tuple[str, ...]]:
    """Built-in models by the size in billions their name or an alias states ('Llama-3.1-70B' -> 70.0;
    'Mixtral-8x7B' states none)."""
    from autopar.catalog.loader import list_models

    out: dict[float, list[str]] = {}
    for spec in list_models():
        sizes = {
            float(m.group(1))
            for label in (spec.name, *spec.aliases)
            for part in re.split(r"[-_/ ]", label.lower())
            if (m := _SIZE.fullmatch(part))
        }
        for size in sizes:
            out.setdefault(size, []).append(spec.name)
    return {size: tuple(names) for size, names in out.items()}


def _size_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """A model size alone: 'a 70B', '405B model', '70 billion parameters'."""
    m = _SIZE.fullmatch(_at(toks, i))
    if m is not None:
        return 1, "size", _number(m.group(1))
    params = _at(toks, i + 2) in ("parameters", "params", "parameter")
    if _PLAIN.fullmatch(_at(toks, i)) and _at(toks, i + 1) == "billion" and params:
        return 3, "size", _number(_at(toks, i))
    return None


# --- the hardware
def _unit_gpus(gpu: str, unit: str) -> int:
    """GPUs in one node (server, tray) or one rack (an NVLink domain spanning hosts) of a catalog GPU, by
    the cluster model's own rule (`ClusterSpec.host_size`, `.node_size`)."""
    from autopar.catalog import get_gpu
    from autopar.specs import ClusterSpec

    one = ClusterSpec(gpu=get_gpu(gpu), num_gpus=1)
    if unit in NODE_WORDS:
        return one.host_size
    if one.node_size <= one.host_size:
        raise AskError(
            f"'{unit}' of {gpu}: its NVLink domain is one server ({one.host_size} GPUs), so a rack has no fixed "
            "size; count the nodes or the GPUs"
        )
    return one.node_size


def _counted(toks: Sequence[Tok], i: int, j: int, count: int, gpu: tuple[int, str]) -> Hit:
    """The hit of `count` GPUs (or nodes/racks/DGX systems of them) named by `gpu` at j, the count at i."""
    used, name = gpu
    k = j + used
    unit = _at(toks, k)
    if unit in NODE_WORDS or unit in RACK_WORDS:
        return k + 1 - i, "gpu", (name, count * _unit_gpus(name, unit))
    if _at(toks, j).startswith(SYSTEM_PREFIXES):
        return k - i, "gpu", (name, count * _unit_gpus(name, "node"))
    return _skip(toks, k, GPU_NOUNS) - i, "gpu", (name, count)


def _counted_gpu_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """'64 H100', '64x H100', '64 x H100 GPUs', '64xH100', '8 nodes of H100', '8 H100 nodes', '2 GB200 racks',
    or a count alone: '128 GPUs'."""
    fused = _COUNT_TIMES_NAME.fullmatch(_at(toks, i))
    if fused is not None:
        hits = _catalog_hits(_gpu_index(), [fused.group(2)])
        return (1, "gpu", (hits[0].name, int(fused.group(1)))) if len(hits) == 1 else None
    prefix = _count_prefix(toks, i)
    if prefix is None:
        return None
    count, j = prefix
    gpu = gpu_at(toks, j)
    if gpu is not None:
        return _counted(toks, i, j, count, gpu)
    unit = _at(toks, j)
    if unit in NODE_WORDS or unit in RACK_WORDS:
        k = _skip(toks, j + 1, _words("of", "with"))
        gpu = gpu_at(toks, k)
        if gpu is not None:
            return _skip(toks, k + gpu[0], GPU_NOUNS) - i, "gpu", (gpu[1], count * _unit_gpus(gpu[1], unit))
    if unit in GPU_NOUNS and j == i + 1:
        return 2, "count", count
    return None


def _gpu_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """A GPU type: 'H100', 'B200 GPUs', 'H100 x 64', 'H100:64'."""
    name, _, count = _at(toks, i).partition(":")
    if count:
        n, hits = _whole(count), _catalog_hits(_gpu_index(), [name])
        return (1, "gpu", (hits[0].name, n)) if n is not None and len(hits) == 1 else None
    gpu = gpu_at(toks, i)
    if gpu is None:
        return None
    j = i + gpu[0]
    n = _whole(_at(toks, j + 1)) if _at(toks, j) in TIMES_WORDS else None
    if n is not None:
        return j + 2 - i, "gpu", (gpu[1], n)
    return _skip(toks, j, GPU_NOUNS) - i, "gpu", (gpu[1], None)


# --- the rest
@lru_cache(maxsize=1)
def framework_words() -> dict[str, str]:
    """Words naming a software stack -> its --framework value (every stack `--framework` takes but the
    catch-all 'other', which is an English word)."""
    from autopar.knobs import STACK_NAMES

    return {**{s: s for s in STACK_NAMES if s != "other"}, **FRAMEWORK_ALIASES}


def _word_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """A precision ('bf16', 'fp8') or a software stack ('torchtitan', 'Megatron-LM', 'megatron core')."""
    word = _at(toks, i)
    if word in PRECISIONS:
        return 1, "precision", PRECISIONS[word]
    stacks = framework_words()
    pair = f"{word}-{_at(toks, i + 1)}"
    if pair in stacks and _one_phrase(toks, i, 2):
        return 2, "framework", stacks[pair]
    return (1, "framework", stacks[word]) if word in stacks else None


def _aside_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """Words about parallelism that set nothing: '3D parallelism', '4D-parallel'."""
    if re.fullmatch(r"[2-5]d", _at(toks, i), re.A) and _at(toks, i + 1).startswith("parallel"):
        return 2, "aside", None
    return None


def _phrase_at(toks: Sequence[Tok], i: int, phrase: Sequence[str]) -> bool:
    return all(_at(toks, i + k) == w for k, w in enumerate(phrase))


def _goal_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """'fastest', 'cheapest', 'most headroom', 'safest', 'lowest cost', 'as fast as possible', ..."""
    for phrase in _GOALS_BY_WORD.get(_at(toks, i), ()):
        if _phrase_at(toks, i, phrase):
            return len(phrase), "goal", GOALS[phrase]
    return None


def _cue_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """A hardware question that `whatif` answers: 'which GPU', 'how many GPUs', 'compare', 'H100 vs B200'."""
    for phrase in CUES:
        if _phrase_at(toks, i, phrase):
            return _skip(toks, i + len(phrase), CUE_NOUNS) - i, "cue", " ".join(phrase)
    return None


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word[-1] in "sS" else word


def _plain_word(word: str) -> bool:
    """A word no rule knows: a candidate name for an accelerator autopar does not know."""
    return _has_letter(word) and word not in FILLERS and word not in KNOWN_WORDS


def _unknown_gpu_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """An accelerator autopar does not know, named so that it is never guessed: '64 A2 NPUs' -> 'A2 NPU',
    '64 X9', 'on TPUv5 chips', '64 NPUs'."""
    prefix = _count_prefix(toks, i)
    j = prefix[1] if prefix is not None else i
    for n in (2, 1):
        words = toks[j : j + n]
        if len(words) < n or not all(_plain_word(t.low) for t in words):
            continue
        noun = _at(toks, j + n)
        gpu_like = any(_GPU_LIKE.fullmatch(t.low) for t in words)
        if noun in OTHER_ACCELERATORS or (noun in GPU_NOUNS and gpu_like):
            other = [_singular(toks[j + n].text)] if noun in OTHER_ACCELERATORS else []
            return j + n + 1 - i, "unknown_gpu", " ".join([*(t.text for t in words), *other])
    if prefix is None:
        return None
    if _at(toks, j) in OTHER_ACCELERATORS:
        return j + 1 - i, "unknown_gpu", _singular(toks[j].text)
    if _plain_word(_at(toks, j)) and _GPU_LIKE.fullmatch(_at(toks, j)):
        return j + 1 - i, "unknown_gpu", toks[j].text
    return None


RULES: tuple[Rule, ...] = (
    _batch_rule,
    _seq_rule,
    _tokens_rule,
    _money_rule,
    _duration_rule,
    _counted_gpu_rule,
    _model_rule,
    _gpu_rule,
    _size_rule,
    _word_rule,
    _goal_rule,
    _cue_rule,
    _aside_rule,
    _unknown_gpu_rule,
)
KNOWN_WORDS = (
    TOKEN_WORDS
    | SEQ_WORDS
    | LEN_WORDS
    | SEQUENCE_NOUNS
    | STEP_WORDS
    | BATCH_WORDS
    | DOLLAR_WORDS
    | MTOK_WORDS
    | GPU_NOUNS
    | OTHER_ACCELERATORS
    | NODE_WORDS
    | RACK_WORDS
    | TIMES_WORDS
    | frozenset(PRECISIONS)
    | frozenset(DURATION_UNITS)
    | frozenset(MAGNITUDES)
    | frozenset(FRAMEWORK_ALIASES)
)


def scan(toks: Sequence[Tok]) -> tuple[list[Fact], list[int]]:
    """Read the words left to right: at each, the first rule that matches claims its words. Returns the
    facts and the indices of the words no rule claimed."""
    facts: list[Fact] = []
    left: list[int] = []
    i = 0
    while i < len(toks):
        for rule in RULES:
            hit = rule(toks, i)
            if hit is not None:
                used, kind, value = hit
                facts.append(Fact(kind, value, i, i + used))
                i += used
                break
        else:
            left.append(i)
            i += 1
    return facts, left


# ------------------------------------------------------------------------------------------------ result
@dataclass(frozen=True)
class Span:
    """Words of the request (characters [start, end)) and what they were understood as."""

    text: str
    meaning: str
    start: int
    end: int


@dataclass(frozen=True)
class Unparsed:
    """Words no rule understood; `matters` when they hold a number, an amount or an accelerator word."""

    text: str
    start: int
    end: int
    matters: bool


@dataclass(frozen=True)
class AskParse:
    """A request as one autopar command: its name, its flags in command-line order (a repeated flag holds a
    tuple), what each phrase was understood as, the words not understood and notes (defaults, conversions)."""

    command: str
    flags: dict[str, str | tuple[str, ...]]
    understood: tuple[Span, ...]
    not_understood: tuple[Unparsed, ...]
    notes: tuple[str, ...] = ()

    @property
    def argv(self) -> list[str]:
        """The command's arguments, as typed after `autopar COMMAND`."""
        out: list[str] = []
        for flag, value in self.flags.items():
            for v in (value,) if isinstance(value, str) else value:
                out += [flag, v]
        return out

    def command_line(self) -> str:
        """The one copy-pasteable line: `autopar optimize --model ... --gpus 64 ...`."""
        return " ".join(["autopar", self.command, *(shell_word(a) for a in self.argv)])

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "argv": self.argv,
            "command_line": self.command_line(),
            "understood": [{"text": s.text, "as": s.meaning} for s in self.understood],
            "not_understood": [u.text for u in self.not_understood],
            "notes": list(self.notes),
        }


def format_si(value: float, suffixes: str = "TBMK") -> str:
    """A count as the shortest suffixed text that reads back to exactly this value ('15T', '1.5T', '500K')."""
    for suffix in suffixes:
        mult = COUNT_SCALE[suffix.lower()]
        if value < mult:
            continue
        text = plain_number(value / mult)
        if len(text) <= 8 and _number(text) * mult == value:
            return text + suffix
    return plain_number(value)


def _meaning(f: Fact) -> str:
    """What one fact says, in words."""
    v = f.value
    shown: dict[str, Callable[[], str]] = {
        "model": lambda: f"model {v}",
        "size": lambda: f"a {plain_number(v)}B model",
        "gpu": lambda: f"{v[1]} x {v[0]}" if v[1] is not None else f"GPU {v[0]}",
        "count": lambda: f"{v} GPUs",
        "seq_len": lambda: f"sequence length {v}",
        "tokens": lambda: f"{format_si(v)} tokens",
        "batch": lambda: f"global batch {v}",
        "batch_tokens": lambda: f"{format_si(v)} tokens per step",
        "precision": lambda: f"precision {v}",
        "framework": lambda: f"framework {v}",
        "deadline": lambda: f"deadline {v}",
        "spend": lambda: f"spending cap ${format_si(v, 'BMK')}",
        "rate": lambda: f"at most ${plain_number(v)} per million tokens",
        "goal": lambda: f"goal: {GOAL_WORDS[v]}",
        "cue": lambda: "a hardware question (whatif)",
        "aside": lambda: "nothing to set",
    }
    return shown[f.kind]() if f.kind in shown else f.kind


# ------------------------------------------------------------------------------------------------ resolution
@dataclass
class _Reader:
    """The facts of one request, with the words each was read from and the errors found so far (with a
    priority: unknown names first, then ambiguous ones, then contradictions)."""

    text: str
    toks: Sequence[Tok]
    facts: list[Fact]
    errors: list[tuple[int, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def said(self, f: Fact) -> str:
        """The words of a fact as written, on one line, cut if long."""
        return excerpt(one_line(self.text[self.toks[f.first].start : self.toks[f.end - 1].end]))

    def all(self, *kinds: str) -> list[Fact]:
        return [f for f in self.facts if f.kind in kinds]

    def fail(self, priority: int, message: str) -> None:
        self.errors.append((priority, message))

    def one(
        self,
        facts: Sequence[Fact],
        what: str,
        value: Callable[[Fact], Any] = lambda f: f.value,
        same: Callable[[Any], Any] = lambda v: v,
    ) -> Any:
        """The value the facts agree on (`same` says when two agree; None without any facts); values that
        differ are an error naming each."""
        seen: dict[Any, Fact] = {}
        for f in facts:
            seen.setdefault(same(value(f)), f)
        if len(seen) > 1:
            shown = ", ".join(f"'{self.said(f)}' says {_meaning(f)}" for f in seen.values())
            self.fail(2, f"conflicting {what}: {shown}; give one")
        return value(facts[0]) if facts else None


def unknown_gpu_message(names: Sequence[str]) -> str:
    """One line: "'A2 NPU' is not a known GPU; known: ...; did you mean ...?" (a hint only where one is close)."""
    import difflib

    index = _gpu_index()
    labels = {key: entry.name for key, entry in index.exact.items()}
    close = [c for n in names for c in difflib.get_close_matches(n.lower(), list(labels), n=3, cutoff=0.6)]
    near = list(dict.fromkeys(labels[c] for c in close))
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    unique = list(dict.fromkeys(names))
    verb = "is not a known GPU" if len(unique) == 1 else "are not known GPUs"
    shown = ", ".join(f"'{excerpt(one_line(n))}'" for n in unique)
    return f"{shown} {verb}; known: {', '.join(index.canonical)}{hint}"


def _model(r: _Reader) -> str | None:
    """The model: a name, or a size that exactly one built-in model has."""
    unknown = [f.value for f in r.all("unknown_gpu")]
    if unknown:
        r.fail(0, unknown_gpu_message(unknown))
    for f in r.all("model_ambiguous"):
        r.fail(
            1, f"'{r.said(f)}' names {len(f.value)} built-in models: {', '.join(f.value)}; use the exact name"
        )
    model = r.one(r.all("model"), "models")
    sizes = r.all("size")
    size = r.one(sizes, "model sizes")
    if size is None:
        return model
    said, names = r.said(sizes[0]), presets_by_size().get(size, ())
    if model is not None:
        if model not in names:
            r.fail(2, f"conflicting models: {model} and '{said}' (not its size); give one")
        return model
    if len(names) == 1:
        return names[0]
    if not names:
        r.fail(
            1, f"'{said}': no built-in model is {plain_number(size)}B (`autopar models` lists them); name one"
        )
    else:
        r.fail(1, f"'{said}' matches {len(names)} built-in models: {', '.join(names)}; name one")
    return None


def _hardware(r: _Reader) -> tuple[list[tuple[str, int | None]], int | None]:
    """The GPU types named, each with its count (own, or the one count given without a type), and that
    count. A type counted twice differently, or one type and a different bare count, is a contradiction."""
    counted = r.all("gpu")
    names = list(dict.fromkeys(f.value[0] for f in counted))
    bare = r.all("count")
    shared = r.one(bare, "GPU counts") if len(names) != 1 else None
    out: list[tuple[str, int | None]] = []
    for name in names:
        mine = [f for f in counted if f.value[0] == name and f.value[1] is not None]
        pool = mine + (bare if len(names) == 1 else [])
        own = r.one(pool, f"GPU counts of {name}", lambda f: f.value[1] if f.kind == "gpu" else f.value)
        out.append((name, own if own is not None else shared))
    for f in [*counted, *bare]:
        if (f.value[1] if f.kind == "gpu" else f.value) == 0:
            r.fail(2, f"'{r.said(f)}': a GPU count must be at least 1")
    return out, (shared if len(names) != 1 else out[0][1])


@dataclass(frozen=True)
class _Problem:
    """What a request asks, resolved: None where it says nothing."""

    model: str | None
    gpus: list[tuple[str, int | None]]
    count: int | None
    seq_len: int | None
    global_batch: int | None
    precision: str | None
    framework: str | None
    tokens: float | None
    deadline: str | None
    spend: float | None
    rate: float | None
    goal: str | None
    cues: tuple[str, ...]


def _global_batch(r: _Reader, seq_len: int | None) -> int | None:
    """The global batch in sequences: stated, or a token count per step over the sequence length."""
    seq = seq_len or DEFAULT_SEQ_LEN
    facts = r.all("batch", "batch_tokens")
    for f in facts:
        if f.kind == "batch_tokens" and f.value % seq:
            r.fail(2, f"'{r.said(f)}' is {f.value / seq:,.2f} sequences of {seq} tokens, not a whole number; "
                   "give the global batch in sequences ('global batch 512')")  # fmt: skip
    return r.one(
        facts, "global batches", lambda f: int(f.value // seq) if f.kind == "batch_tokens" else f.value
    )


def _problem(r: _Reader) -> _Problem:
    """Every part of the request, each stated at most once (contradictions are errors)."""
    from autopar.units import parse_duration

    gpus, count = _hardware(r)
    seq_len = r.one(r.all("seq_len"), "sequence lengths")
    precisions = {f.value for f in r.all("precision")}
    return _Problem(
        model=_model(r),
        gpus=gpus,
        count=count,
        seq_len=seq_len,
        global_batch=_global_batch(r, seq_len),
        precision=",".join(p for p in PRECISION_ORDER if p in precisions) or None,
        framework=r.one(r.all("framework"), "frameworks"),
        tokens=r.one(r.all("tokens"), "token budgets"),
        deadline=r.one(r.all("deadline"), "deadlines", same=parse_duration),
        spend=r.one(r.all("spend"), "spending caps"),
        rate=r.one(r.all("rate"), "$/Mtoken caps"),
        goal=r.one(r.all("goal"), "goals"),
        cues=tuple(dict.fromkeys(f.value for f in r.all("cue"))),
    )


def _money_check(r: _Reader, p: _Problem) -> None:
    if p.spend is not None and p.rate is not None:
        said = [r.said(f) for f in r.all("spend", "rate")]
        r.fail(2, f"two money limits, '{said[0]}' and '{said[1]}': give one (a total or a $/Mtoken rate)")


def objectives_for(goal: str) -> tuple[str, ...]:
    """--objectives for a goal: its objective first, then the default ones in their order."""
    return (goal, *(o for o in DEFAULT_OBJECTIVES if o != goal))


def _workload_flags(p: _Problem) -> dict[str, str]:
    """Model and workload flags both commands share."""
    flags: dict[str, str] = {}
    for flag, value in (
        ("--seq-len", p.seq_len),
        ("--global-batch", p.global_batch),
        ("--precision", p.precision),
        ("--framework", p.framework),
    ):
        if value is not None:
            flags[flag] = str(value)
    return flags


def _optimize_flags(r: _Reader, p: _Problem) -> dict[str, str | tuple[str, ...]]:
    """`optimize` on one cluster; a total spend becomes its $/Mtoken cap over the token budget."""
    from autopar.units import TOKENS_PER_MTOKEN

    flags: dict[str, str | tuple[str, ...]] = {} if p.model is None else {"--model": p.model}
    if p.gpus:
        flags["--gpu"] = p.gpus[0][0]
    if p.count is not None:
        flags["--gpus"] = str(p.count)
    flags |= _workload_flags(p)
    if p.tokens is not None:
        flags["--tokens"] = format_si(p.tokens)
    if p.goal is not None:
        flags["--objectives"] = ",".join(objectives_for(p.goal))
    rate = p.rate
    if p.spend is not None and p.tokens is None:
        said = r.said(r.all("spend")[0])
        r.fail(2, f"'{said}' is a total spend: optimize caps $ per million tokens, so give the token budget too "
               "('15T tokens'), or a rate ('$0.50 per million tokens')")  # fmt: skip
    elif p.spend is not None and p.tokens is not None:
        # a derived rate to 6 significant figures: a cap of $0.333333/Mtoken, not 0.3333333333333333
        rate = float(f"{p.spend / (p.tokens / TOKENS_PER_MTOKEN):.6g}")
        r.notes.append(
            f"${format_si(p.spend, 'BMK')} over {format_si(p.tokens)} tokens = ${plain_number(rate)} per "
            "million tokens (--max-cost)"
        )
    if rate is not None:
        flags["--max-cost"] = plain_number(rate)
    return flags


def _options(r: _Reader, p: _Problem) -> tuple[str, ...]:
    """whatif --option values: GPU:COUNT, or a bare GPU for --deadline sizing (the fewest that meet it)."""
    gpus = p.gpus
    if not gpus:
        if "which" in p.cues:
            r.fail(2, "'which GPU': name the GPUs to choose from, e.g. 'H100 or B200'")
        gpus = [(DEFAULT_GPU, p.count)]
        r.notes.append(f"no GPU type named: {DEFAULT_GPU}, autopar's default GPU")
    bare = [name for name, count in gpus if count is None]
    if bare and p.deadline is None:
        r.fail(
            2, f"'{bare[0]}' has no count: give one ('64 {bare[0]}') or a deadline to size it ('in 30 days')"
        )
    return tuple(name if count is None else f"{name}:{count}" for name, count in gpus)


def _whatif_flags(r: _Reader, p: _Problem) -> dict[str, str | tuple[str, ...]]:
    """`whatif` over the hardware options; a $/Mtoken cap becomes its total over the token budget."""
    from autopar.units import TOKENS_PER_MTOKEN

    flags: dict[str, str | tuple[str, ...]] = {} if p.model is None else {"--model": p.model}
    flags["--option"] = _options(r, p)
    flags |= _workload_flags(p)
    if p.tokens is None:
        r.fail(2, "comparing hardware or meeting a deadline needs the token budget: add e.g. '15T tokens'")
        return flags
    flags["--tokens"] = format_si(p.tokens)
    if p.deadline is not None:
        flags["--deadline"] = p.deadline
    spend = p.spend
    if p.rate is not None:
        spend = p.rate * p.tokens / TOKENS_PER_MTOKEN
        r.notes.append(
            f"${plain_number(p.rate)} per million tokens over {format_si(p.tokens)} tokens = "
            f"${format_si(spend, 'BMK')} (--max-spend)"
        )
    if spend is not None:
        flags["--max-spend"] = format_si(spend, "BMK")
    if p.goal is not None:
        r.notes.append(
            f"'{GOAL_WORDS[p.goal]}': whatif has no goal option; it ranks the options by cost within the "
            "deadline and cap and shows each one's time and cost"
        )
    return flags


def _defaults_note(command: str, flags: dict[str, Any]) -> str | None:
    """Which defaults apply because the request did not say (model, GPU, count)."""
    from autopar.defaults import DEFAULT_GPUS

    said = {"--model": DEFAULT_MODEL}
    if command == OPTIMIZE:
        said |= {"--gpu": DEFAULT_GPU, "--gpus": str(DEFAULT_GPUS)}
    unsaid = [f"{flag} {value}" for flag, value in said.items() if flag not in flags]
    return f"not in the request, so autopar's defaults: {', '.join(unsaid)}" if unsaid else None


def _unparsed(r: _Reader, left: Sequence[int]) -> tuple[Unparsed, ...]:
    """Runs of consecutive words no rule claimed, those made only of filler words dropped."""
    runs: list[list[int]] = []
    for k in left:
        if runs and runs[-1][-1] == k - 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    out = []
    for run in runs:
        words = [r.toks[k] for k in run]
        if all(w.low in FILLERS for w in words):
            continue
        matters = any(
            any(c.isdigit() for c in w.low) or "$" in w.low or w.low in OTHER_ACCELERATORS for w in words
        )
        start, end = words[0].start, words[-1].end
        out.append(Unparsed(excerpt(one_line(r.text[start:end])), start, end, matters))
    return tuple(out)


def parse_request(text: str) -> AskParse:
    """The command a plain-language request asks for (see the module doc); AskError when it cannot be one."""
    if len(text) > MAX_REQUEST_CHARS:
        raise AskError(f"request: {len(text):,} characters; at most {MAX_REQUEST_CHARS:,} are read")
    toks = tokenize(text)
    facts, left = scan(toks)
    if all(f.kind == "aside" for f in facts):
        shown = excerpt(one_line(text.strip()))
        raise AskError(
            f"nothing understood in '{shown}': say what to plan, e.g. 'Llama 3 70B on 64 H100, 8k context, "
            "15T tokens, fastest under $5M'"
        )
    r = _Reader(text, toks, facts)
    p = _problem(r)
    _money_check(r, p)
    command = WHATIF if p.cues or p.deadline is not None or len(p.gpus) > 1 else OPTIMIZE
    flags = _whatif_flags(r, p) if command == WHATIF else _optimize_flags(r, p)
    if r.errors:
        raise AskError("; ".join(m for _, m in sorted(r.errors, key=lambda e: e[0])))
    default = _defaults_note(command, flags)
    spans = tuple(Span(r.said(f), _meaning(f), toks[f.first].start, toks[f.end - 1].end) for f in facts)
    notes = (*r.notes, *([default] if default else []))
    return AskParse(command, flags, spans, _unparsed(r, left), notes)


def check_understood(parsed: AskParse, lenient: bool) -> None:
    """Words not understood that look like they matter (a number, an amount, an accelerator word) are an
    error unless `lenient`: they would otherwise be dropped from the problem without a word."""
    serious = [u.text for u in parsed.not_understood if u.matters]
    if serious and not lenient:
        shown = ", ".join(f"'{t}'" for t in serious)
        raise AskError(
            f"not understood: {shown}, which looks like part of the problem (a number, an amount or an "
            "accelerator); rephrase it (`autopar ask --help` lists what is read) or add --lenient to go on without it"
        )


def render_request(parsed: AskParse) -> str:
    """The parse written back as a plain request (`parse_request` reads it to the same command and flags):
    the round trip the tests check."""
    f = parsed.flags
    words = ["compare"] if parsed.command == WHATIF else []
    if "--model" in f:
        words.append(str(f["--model"]))
    hardware = [" ".join(reversed(o.split(":"))) for o in f.get("--option", ())]
    if "--gpu" in f or "--gpus" in f:
        hardware = [
            " ".join(str(f[k]) for k in ("--gpus", "--gpu") if k in f) + ("" if "--gpu" in f else " GPUs")
        ]
    words.append(" or ".join(hardware))
    phrases = {
        "--seq-len": "{} context",
        "--global-batch": "global batch {}",
        "--precision": "{}",
        "--framework": "{}",
        "--tokens": "{} tokens",
        "--deadline": "in {}",
        "--max-spend": "under ${}",
        "--max-cost": "under ${} per million tokens",
    }
    for flag, phrase in phrases.items():
        if flag in f:
            words.append(phrase.format(str(f[flag]).replace(",", " or ")))
    if "--objectives" in f:
        words.append(GOAL_WORDS[str(f["--objectives"]).split(",")[0]])
    return ", ".join(w for w in words if w)
