"""Phrase rules for the workload: the global batch ('global batch 1024', '4M tokens per step'), the
sequence length ('8k context'; binary, as `--seq-len` reads it: 8k = 8,192) and the token budget
('15T tokens', '15 trillion tokens').
"""

from __future__ import annotations

from collections.abc import Sequence

from autopar.cli.ask_parse.errors import AskError
from autopar.cli.ask_parse.facts import Hit
from autopar.cli.ask_parse.numbers import QTY, positive, quantity, whole_number
from autopar.cli.ask_parse.tokens import Tok, skip, word_at
from autopar.cli.ask_parse.vocabulary import (
    BATCH_WORDS,
    LEN_WORDS,
    LINK_WORDS,
    PER_WORDS,
    SEQ_WORDS,
    SEQUENCE_NOUNS,
    STEP_WORDS,
    TOKEN_WORDS,
    word_set,
)
from autopar.errors import SpecError
from autopar.text import excerpt


def batch_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """'global batch 1024', 'batch size of 512', 'gbs 512', '1024 sequences per step', '4M tokens per step'."""
    j = skip(toks, i, word_set("global"))
    if word_at(toks, j) in BATCH_WORDS:
        k = skip(toks, skip(toks, j + 1, word_set("size")), LINK_WORDS)
        n = whole_number(word_at(toks, k))
        if n is not None:
            return skip(toks, k + 1, SEQUENCE_NOUNS) - i, "batch", n
        return None
    n = whole_number(word_at(toks, i))
    if n is not None and _per_step(toks, i + 1, SEQUENCE_NOUNS):
        return 4, "batch", n
    q = quantity(toks, i, "kmbgt")
    if q is not None and _per_step(toks, i + q[0], TOKEN_WORDS):
        return q[0] + 3, "batch_tokens", q[1]
    return None


def _per_step(toks: Sequence[Tok], i: int, nouns: frozenset[str]) -> bool:
    """'sequences per step', 'tokens a batch' at i."""
    return (
        word_at(toks, i) in nouns and word_at(toks, i + 1) in PER_WORDS and word_at(toks, i + 2) in STEP_WORDS
    )


def _is_seq_len(word: str) -> bool:
    """A sequence length word: a number with no suffix or a binary K/M ('8k', '8192', '128K')."""
    m = QTY.fullmatch(word)
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


def seq_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """'sequence length 8192', 'context of 8k', '8k context', '8K seq', '128k tokens context'."""
    if word_at(toks, i) in SEQ_WORDS:
        j = skip(toks, skip(toks, i + 1, LEN_WORDS), LINK_WORDS)
        if not _is_seq_len(word_at(toks, j)):
            return None
        return skip(toks, j + 1, TOKEN_WORDS) - i, "seq_len", _seq_value(toks[j])
    if not _is_seq_len(word_at(toks, i)):
        return None
    j = skip(toks, i + 1, TOKEN_WORDS)
    if word_at(toks, j) in SEQ_WORDS or (j > i + 1 and word_at(toks, j) in SEQUENCE_NOUNS):
        return skip(toks, j + 1, LEN_WORDS) - i, "seq_len", _seq_value(toks[i])
    return None


def tokens_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """'15T tokens', '15 trillion tokens', '500B tokens', a bare '15T', 'tokens: 2T'."""
    hit = _tokens_hit(toks, i)
    return None if hit is None else positive(hit, toks, i, "a token budget")


def _tokens_hit(toks: Sequence[Tok], i: int) -> Hit | None:
    q = quantity(toks, i, "kmbgt")
    if q is not None:
        used, value = q
        if word_at(toks, i + used) in TOKEN_WORDS:
            return used + 1, "tokens", value
        # trillions are tokens, never sizes
        if word_at(toks, i).endswith("t") or word_at(toks, i + 1) == "trillion":
            return used, "tokens", value
        return None
    if word_at(toks, i) in TOKEN_WORDS:
        j = skip(toks, skip(toks, i + 1, word_set("budget", "count")), LINK_WORDS)
        q = quantity(toks, j, "kmbgt")
        # a suffix or a magnitude word
        if q is not None and (q[0] == 2 or not word_at(toks, j)[-1].isdigit()):
            return j + q[0] - i, "tokens", q[1]
    return None
