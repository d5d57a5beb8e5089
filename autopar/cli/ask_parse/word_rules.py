"""Phrase rules for settings named by one word or a fixed phrase: a precision ('bf16', 'fp8'), a
software stack ('torchtitan', 'Megatron-LM'), a goal ('fastest', 'cheapest', 'most headroom'), a hardware
question ('which GPU', 'how many GPUs', 'compare') and asides that set nothing ('3D parallelism').
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from autopar.cli.ask_parse.facts import Hit
from autopar.cli.ask_parse.tokens import Tok, one_phrase, phrase_at, skip, word_at
from autopar.cli.ask_parse.vocabulary import (
    CUE_NOUNS,
    CUES,
    FRAMEWORK_ALIASES,
    GOALS,
    GOALS_BY_WORD,
    PRECISIONS,
)


@lru_cache(maxsize=1)
def framework_words() -> dict[str, str]:
    """Words naming a software stack -> its --framework value (every stack `--framework` takes but the
    catch-all 'other', which is an English word)."""
    from autopar.knobs import STACK_NAMES

    return {**{s: s for s in STACK_NAMES if s != "other"}, **FRAMEWORK_ALIASES}


def word_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """A precision ('bf16', 'fp8') or a software stack ('torchtitan', 'Megatron-LM', 'megatron core')."""
    word = word_at(toks, i)
    if word in PRECISIONS:
        return 1, "precision", PRECISIONS[word]
    stacks = framework_words()
    pair = f"{word}-{word_at(toks, i + 1)}"
    if pair in stacks and one_phrase(toks, i, 2):
        return 2, "framework", stacks[pair]
    return (1, "framework", stacks[word]) if word in stacks else None


def aside_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """Words about parallelism that set nothing: '3D parallelism', '4D-parallel'."""
    if re.fullmatch(r"[2-5]d", word_at(toks, i), re.A) and word_at(toks, i + 1).startswith("parallel"):
        return 2, "aside", None
    return None


def goal_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """'fastest', 'cheapest', 'most headroom', 'safest', 'lowest cost', 'as fast as possible', ..."""
    for phrase in GOALS_BY_WORD.get(word_at(toks, i), ()):
        if phrase_at(toks, i, phrase):
            return len(phrase), "goal", GOALS[phrase]
    return None


def cue_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """A hardware question that `whatif` answers: 'which GPU', 'how many GPUs', 'compare', 'H100 vs B200'."""
    for phrase in CUES:
        if phrase_at(toks, i, phrase):
            return skip(toks, i + len(phrase), CUE_NOUNS) - i, "cue", " ".join(phrase)
    return None
