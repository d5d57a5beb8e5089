"""The request's words: `tokenize` splits the text into `Tok`s in one linear pass (the one regular
expression over the whole text has no nested repetition), and the helpers every phrase rule reads them
with: the word at an index, an optional word, a fixed phrase, a run of words no punctuation splits.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass


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


def one_phrase(toks: Sequence[Tok], i: int, n: int) -> bool:
    """Whether words i..i+n-1 exist and no punctuation splits them (a name never spans a comma)."""
    return i + n <= len(toks) and not any(t.after_break for t in toks[i + 1 : i + n])


def word_at(toks: Sequence[Tok], i: int) -> str:
    """The lower-case word at i ('' past the end)."""
    return toks[i].low if i < len(toks) else ""


def skip(toks: Sequence[Tok], i: int, words: frozenset[str]) -> int:
    """i + 1 when the word at i is one of `words` (an optional word), else i."""
    return i + 1 if word_at(toks, i) in words else i


def phrase_at(toks: Sequence[Tok], i: int, phrase: Sequence[str]) -> bool:
    return all(word_at(toks, i + k) == w for k, w in enumerate(phrase))


def has_letter(text: str) -> bool:
    return any(c.isalpha() for c in text)
